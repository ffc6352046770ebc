"""What a run keeps grows with nothing but its configuration (issue 18 point 4): once the store of the last
``KEPT_RECORDS`` records (for ``collect()``) is full, thousands more steps leave nothing behind. The JSONL backend used
to keep every step it wrote (for its read-back at close): 40 bytes a step, 40 MB over a million steps."""

from __future__ import annotations

import gc
import json
import tracemalloc
from pathlib import Path

from otel_bridge import Bridge
from otel_bridge.records import KEPT_RECORDS

MORE_STEPS = 4000
BOUND_BYTES = 80_000  # a dict's table resizes as records come and go: retained memory swings by tens of KB


def test_steps_after_the_record_store_is_full_leave_nothing_behind(tmp_path: Path) -> None:
    values = {f"trainer/metric_{i}": float(i) for i in range(20)}
    config = {"trackers": [{"type": "jsonl"}], "run": {"name": "memory", "dir": str(tmp_path)}}
    tracemalloc.start()
    try:
        with Bridge.from_config(config) as bridge:
            counters = [bridge.meter("trainer").create_counter(f"c{i}") for i in range(20)]

            def steps(first: int, last: int) -> int:
                for step in range(first, last):
                    for counter in counters:
                        counter.add(1)
                    bridge.log(values, step=step)
                    bridge.collect(step)
                gc.collect()
                return tracemalloc.get_traced_memory()[0]

            full = steps(0, KEPT_RECORDS + 100)
            later = steps(KEPT_RECORDS + 100, KEPT_RECORDS + 100 + MORE_STEPS)
    finally:
        tracemalloc.stop()
    assert later - full < BOUND_BYTES  # one small object kept per step would be 160 KB
    lines = (tmp_path / "memory" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == list(range(KEPT_RECORDS + 100 + MORE_STEPS))
