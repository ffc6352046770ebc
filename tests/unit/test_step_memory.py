"""What a run keeps grows with nothing but its configuration (issue 18 point 4): once the store of the last
``KEPT_RECORDS`` records (for ``collect()``) is full and the run settled, 1,500 more steps leave nothing behind. The
JSONL backend used to keep every step it wrote (for its read-back at close): 40 bytes a step, 40 MB over a million
steps.

Measured with ``tracemalloc`` on what the bridge's own code allocated and still holds, leaving out the record store
(bounded by its capacity, its table resizes by tens of KB as records come and go) and everything else in the process.
"""

from __future__ import annotations

import gc
import json
import tracemalloc
from pathlib import Path

from otel_bridge import Bridge
from otel_bridge.pipeline.record_store import KEPT_RECORDS

SETTLE_STEPS = 500  # after the store is full: one-time allocations (about 5 KB) are made by then
MORE_STEPS = 1500
BOUND_BYTES = 8_000  # measured: flat within 0.2 KB; one reference kept per step (8 bytes) would be 12 KB


def held_by_the_bridge() -> int:
    """Bytes allocated by ``otel_bridge`` code, other than the record store, and still alive."""
    gc.collect()
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [
            tracemalloc.Filter(True, "*/otel_bridge/*"),
            tracemalloc.Filter(False, "*/otel_bridge/pipeline/record_store.py"),
        ]
    )
    return sum(stat.size for stat in snapshot.statistics("filename"))


def test_steps_after_the_record_store_is_full_leave_nothing_behind(tmp_path: Path) -> None:
    values = {f"trainer/metric_{i}": float(i) for i in range(20)}
    config = {"trackers": [{"type": "jsonl"}], "run": {"name": "memory", "dir": str(tmp_path)}}
    with Bridge.from_config(config) as bridge:
        counters = [bridge.meter("trainer").create_counter(f"c{i}") for i in range(20)]

        def steps(first: int, last: int) -> None:
            for step in range(first, last):
                for counter in counters:
                    counter.add(1)
                bridge.log(values, step=step)
                bridge.collect(step)

        # The first steps are not traced (tracing makes every allocation several times dearer): what they left behind
        # is in neither measurement, and every record the full store holds at the first was made while traced.
        settled = KEPT_RECORDS + SETTLE_STEPS
        steps(0, settled - KEPT_RECORDS)
        tracemalloc.start()
        try:
            steps(settled - KEPT_RECORDS, settled)
            full = held_by_the_bridge()
            steps(settled, settled + MORE_STEPS)
            later = held_by_the_bridge()
        finally:
            tracemalloc.stop()
    assert later - full < BOUND_BYTES
    lines = (tmp_path / "memory" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == list(range(KEPT_RECORDS + SETTLE_STEPS + MORE_STEPS))
