"""A tiny LightningModule trained on the CPU with ``OtelBridgeLogger``: one record per step with the module's
``self.log(...)`` values (``train/loss``) beside what two simulated vLLM rollout servers did during that step
(``rollout/vllm/...``). The epoch's mean loss (``train/epoch_loss``, logged with ``on_epoch=True``) reaches the logger
after the epoch's last batch, at that batch's step: it joins that step's record.

    pip install './otel-bridge[lightning,tensorboard]'   # the path of the clone
    python examples/lightning_logger.py --steps 5 --out runs

writes ``runs/lightning/metrics.jsonl``, ``runs/lightning/tensorboard/`` and ``runs/lightning/hparams.json``.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer, seed_everything
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from otel_bridge.integrations.lightning import OtelBridgeLogger
from otel_bridge.tools.demo import simulated_rollout_servers

_log = logging.getLogger("examples.lightning_logger")

ROLLOUT_WAIT_S = 0.05
"""How long each step waits for its (simulated) generations."""
FEATURES = 16


class TinyRegressor(LightningModule):
    """Two linear layers trained with mean squared error."""

    def __init__(self, lr: float = 1e-2, hidden: int = 32) -> None:
        super().__init__()
        self.save_hyperparameters()  # Lightning hands these to logger.log_hyperparams -> hparams.json
        self.net = nn.Sequential(nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Predict one value per sample."""
        out: torch.Tensor = self.net(x)
        return out.squeeze(-1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        """One optimizer step's loss, logged as ``train/loss``."""
        time.sleep(ROLLOUT_WAIT_S)  # the batch's generations, as if they came from the rollout servers
        x, y = batch
        loss = nn.functional.mse_loss(self(x), y)
        self.log("train/loss", loss)
        self.log("train/batch_size", float(len(x)))
        self.log("train/epoch_loss", loss, on_step=False, on_epoch=True)
        return loss

    def configure_optimizers(self) -> Any:
        """Plain SGD."""
        return torch.optim.SGD(self.parameters(), lr=self.hparams["lr"])


def random_loader(size: int, batch_size: int = 8) -> DataLoader[tuple[torch.Tensor, ...]]:
    """``size`` samples of a noisy linear function, in memory."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(size, FEATURES, generator=generator)
    y = x @ torch.linspace(-1.0, 1.0, FEATURES) + 0.1 * torch.randn(size, generator=generator)
    return DataLoader(TensorDataset(x, y), batch_size=batch_size, num_workers=0)


def main(out_dir: Path, steps: int) -> Path:
    """Train for ``steps`` steps with the logger and return the run directory."""
    seed_everything(0, verbose=False)
    with simulated_rollout_servers(2, seed=0, requests_per_s=40.0) as servers:
        logger = OtelBridgeLogger(
            {
                "scrape": {"targets": [server.url for _, _, server in servers], "sample_interval_s": 0.1},
                "metrics": [{"preset": "vllm"}],
                "trackers": [{"type": "jsonl"}, {"type": "tensorboard"}],
                "run": {"name": "lightning", "dir": str(out_dir)},
            }
        )
        trainer = Trainer(
            max_steps=steps,
            accelerator="cpu",
            logger=logger,
            log_every_n_steps=1,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(TinyRegressor(), train_dataloaders=random_loader(8 * steps))  # finalize() closes the bridge
        return Path(logger.log_dir)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("runs"))
    cli = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    _log.info("records in %s", main(cli.out, cli.steps))
