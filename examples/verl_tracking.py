"""A verl-style PPO loop logging through otel-bridge's drop-in ``Tracking``, against two simulated vLLM servers.

Every step's record holds the trainer's verl-style metrics (``actor/pg_loss``, ``critic/score/mean``,
``timing_s/gen``, ...) beside what the rollout servers did during that step (``rollout/vllm/...``). Validation metrics
(``val-core/...``) are logged by a separate ``log()`` call for the same step, as verl recipes do: they join that step's
record. The computations are fake; the rollout servers are otel-bridge's simulated vLLM endpoints with a random
background workload.

    python examples/verl_tracking.py --steps 10 --out runs

writes ``runs/otel-bridge-examples/verl-ppo/metrics.jsonl`` and ``.../tensorboard/``
(``<run.dir>/<project>/<experiment>``; a re-run writes ``verl-ppo-2``) and prints each record on the console.
"""

from __future__ import annotations

import argparse
import logging
import math
import random
import time
from pathlib import Path
from typing import Any

from otel_bridge.integrations.verl import Tracking
from otel_bridge.tools.demo import simulated_rollout_servers

_log = logging.getLogger("examples.verl_tracking")

GENERATE_S = 0.15
"""How long the fake rollout phase of a step takes."""


def ppo_config() -> dict[str, Any]:
    """A small verl-like configuration (the hyperparameters written to ``hparams.json``)."""
    return {
        "trainer": {"project_name": "otel-bridge-examples", "experiment_name": "verl-ppo", "logger": ["console"]},
        "actor_rollout_ref": {"actor": {"optim": {"lr": 1e-6}, "ppo_mini_batch_size": 64}, "rollout": {"n": 4}},
        "algorithm": {"adv_estimator": "grpo", "kl_ctrl": {"kl_coef": 0.001}},
    }


def fake_ppo_step(step: int, rng: random.Random) -> dict[str, float]:
    """One PPO step's metrics, verl-style (rollout, reward, advantage, actor update), with fake numbers."""
    timing: dict[str, float] = {}
    start = time.perf_counter()
    time.sleep(GENERATE_S)  # the rollouts: the simulated vLLM servers are busy meanwhile
    timing["timing_s/gen"] = time.perf_counter() - start
    score = 1.0 - math.exp(-step / 4.0) + 0.05 * rng.random()
    response_length = 200.0 + 30.0 * rng.random()
    start = time.perf_counter()
    pg_loss = 0.5 * math.exp(-step / 6.0) + 0.02 * rng.random()
    timing["timing_s/update_actor"] = time.perf_counter() - start
    return {
        "actor/pg_loss": pg_loss,
        "actor/entropy": 1.2 - 0.05 * step,
        "actor/grad_norm": 0.5 + rng.random(),
        "actor/pg_clipfrac": 0.01 * rng.random(),
        "critic/score/mean": score,
        "critic/rewards/mean": score - 0.001,
        "critic/advantages/mean": 0.0,
        "response_length/mean": response_length,
        **timing,
        "timing_s/step": sum(timing.values()),
    }


def fake_validation(step: int) -> dict[str, float]:
    """The validation metrics verl logs (``val-core/<data source>/<reward>/mean@<n>``), with fake numbers."""
    return {"val-core/gsm8k/reward/mean@1": 0.1 + 0.8 * (1.0 - math.exp(-step / 4.0))}


def main(out_dir: Path, steps: int, test_freq: int = 2) -> Path:
    """Run ``steps`` PPO steps (after a validation at step 0, as verl does; again every ``test_freq`` steps and at
    the last step) and return the run directory."""
    rng = random.Random(0)
    config = ppo_config()
    with simulated_rollout_servers(2, seed=0, requests_per_s=40.0) as servers:
        bridge_config = {
            "scrape": {"targets": [server.url for _, _, server in servers], "sample_interval_s": 0.1},
            "metrics": [{"preset": "vllm"}],
            "run": {"dir": str(out_dir)},
        }
        tracking = Tracking(
            project_name=config["trainer"]["project_name"],
            experiment_name=config["trainer"]["experiment_name"],
            default_backend=["console", "tensorboard", "jsonl"],
            config=config,
            bridge_config=bridge_config,
        )
        try:
            # verl validates before training and logs it at step 0: that call opens the first step's window.
            tracking.log(data=fake_validation(0), step=0)
            for step in range(1, steps + 1):
                metrics = fake_ppo_step(step, rng)
                tracking.log(data=metrics, step=step)  # the step's boundary
                if step % test_freq == 0 or step == steps:
                    tracking.log(data=fake_validation(step), step=step)  # same step: joins its record
        finally:
            report = tracking.finish()
        _log.info("delivered to %s: %s", ", ".join(tracking.logger) or "no tracker", report.complete)
        return tracking.run_dir


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("runs"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    _log.info("records in %s", main(args.out, args.steps))
