"""The soak's SIGTERM trainer: a child process that trains until it is terminated.

    python -m soak.trainer RUN_DIR START SEED

It continues the run ``sigterm`` under ``RUN_DIR`` (``run.resume``: the JSONL tracker appends to the same file) from
step ``START``, with the bridge's opt-in SIGTERM handling (``run.handle_sigterm: true``). An infrastructure source
that is sometimes slow (0 to 0.3 s per window, seeded) keeps delivery behind at times, so the signal also lands while
a boundary waits for room in the step queue (``queue_size: 2``). It writes ``boundary N`` before step N's boundary,
``begin N`` on entering its block and ``finished N`` after leaving it, each in one write, so the parent knows where
the signal landed: which steps began and which ended before it.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Sequence

from opentelemetry.sdk.metrics.export import ScopeMetrics

from otel_bridge import Bridge, BridgeConfig
from otel_bridge.window import StepWindow
from soak.accounting import TRAINER_KEY

RUN_NAME = "sigterm"


class SometimesSlowSource:
    """An infrastructure source taking 0 to 0.3 s per window: delivery falls behind the trainer now and then."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def produce(self, timeout_millis: float = 10_000, *, window: StepWindow) -> Sequence[ScopeMetrics]:
        time.sleep(self._rng.choice((0.0, 0.0, 0.0, 0.002, 0.05, 0.3)))
        return []


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")  # one write: a signal cannot split the line
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Train from step ``START`` until SIGTERM."""
    run_dir, start, seed = (argv if argv is not None else sys.argv[1:])[:3]
    rng = random.Random(int(seed))
    config = BridgeConfig.load(
        {
            "run": {"name": RUN_NAME, "dir": run_dir, "handle_sigterm": True, "resume": True},
            "delivery": {"queue_size": 2, "max_block_s": 0.5, "close_timeout_s": 20},
        }
    )
    bridge = Bridge(config, producers=[SometimesSlowSource(int(seed) + 1)])
    step = int(start)
    while True:
        _say(f"boundary {step}")  # begin_step may wait here for room in the step queue
        with bridge.step(step):
            _say(f"begin {step}")
            time.sleep(rng.uniform(0, 0.01))
            bridge.log({TRAINER_KEY: float(step), "trainer/loss": 1.0 / (1 + step)}, step=step)
            time.sleep(rng.uniform(0, 0.005))
        _say(f"finished {step}")
        step += 1


if __name__ == "__main__":
    sys.exit(main())
