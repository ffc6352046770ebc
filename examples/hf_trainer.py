"""A tiny model trained by ``transformers.Trainer`` on the CPU, with ``OtelBridgeCallback`` writing one record per
optimizer step: the Trainer's logs (``train/loss``, ``train/grad_norm``, ``train/learning_rate``, ...) beside what two
simulated vLLM rollout servers did during that step (``rollout/vllm/...``).

Think of an online-distillation or RL job whose batches come from vLLM: here the model is a two-layer regressor built
in code, the data random and in memory, and each optimizer step first waits a little as if its samples were being
generated (inside the step's window, which runs from ``on_step_begin`` to ``on_step_end``). The model is evaluated at
the last step; ``eval/loss`` joins that step's record.

    pip install './otel-bridge[huggingface,tensorboard]'   # the path of the clone
    python examples/hf_trainer.py --steps 5 --out runs

writes ``runs/hf-trainer/metrics.jsonl`` and ``runs/hf-trainer/tensorboard/``.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import Trainer, TrainingArguments

from otel_bridge import Bridge
from otel_bridge.integrations.huggingface import OtelBridgeCallback
from otel_bridge.tools.demo import simulated_rollout_servers

_log = logging.getLogger("examples.hf_trainer")

ROLLOUT_WAIT_S = 0.05
"""How long each optimizer step waits for its (simulated) generations."""
FEATURES = 16


class TinyRegressor(nn.Module):
    """Two linear layers; returns ``{"loss", "logits"}`` as a Transformers model does."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Predict; with ``labels``, also the mean squared error."""
        logits = self.net(x).squeeze(-1)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = nn.functional.mse_loss(logits, labels)
        return out


def random_dataset(size: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """``size`` samples of a noisy linear function, in memory."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(size, FEATURES, generator=generator)
    y = x @ torch.linspace(-1.0, 1.0, FEATURES) + 0.1 * torch.randn(size, generator=generator)
    return [{"x": x[i], "labels": y[i]} for i in range(size)]


class RolloutTrainer(Trainer):  # type: ignore[misc, unused-ignore]  # Any when transformers is untyped
    """A Trainer whose training micro-batches first wait for their (simulated) generations, inside the step."""

    def training_step(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """Wait as if vLLM were generating the batch's samples, then take the usual training step."""
        time.sleep(ROLLOUT_WAIT_S)
        loss: torch.Tensor = super().training_step(*args, **kwargs)
        return loss


def main(out_dir: Path, steps: int) -> Path:
    """Train for ``steps`` optimizer steps with the callback and return the run directory."""
    torch.manual_seed(0)
    with simulated_rollout_servers(2, seed=0, requests_per_s=40.0) as servers:
        bridge = Bridge.from_config(
            {
                "scrape": {"targets": [server.url for _, _, server in servers], "sample_interval_s": 0.1},
                "metrics": [{"preset": "vllm"}],
                "trackers": [{"type": "jsonl"}, {"type": "tensorboard"}],
                "run": {"name": "hf-trainer", "dir": str(out_dir)},
            }
        )
        with bridge:
            args = TrainingArguments(
                output_dir=str(bridge.run_dir / "trainer"),
                max_steps=steps,
                per_device_train_batch_size=8,
                learning_rate=1e-2,
                logging_steps=1,
                eval_strategy="steps",
                eval_steps=steps,
                per_device_eval_batch_size=8,
                save_strategy="no",
                report_to="none",
                use_cpu=True,
                disable_tqdm=True,
                remove_unused_columns=False,
                dataloader_num_workers=0,
                seed=0,
            )
            trainer = RolloutTrainer(
                model=TinyRegressor(),
                args=args,
                train_dataset=random_dataset(8 * steps),
                eval_dataset=random_dataset(16, seed=1),
                callbacks=[OtelBridgeCallback(bridge)],
            )
            trainer.train()
        return bridge.run_dir


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("runs"))
    cli = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    _log.info("records in %s", main(cli.out, cli.steps))
