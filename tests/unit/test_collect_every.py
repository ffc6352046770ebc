"""``otel.collect_every: N``: loops with very short steps pay the SDK's collection at every N-th step only.

The trade-off this checks: the instruments' keys appear in every N-th record (the first step's, then each N-th), a
histogram's statistics there cover the observations of the steps since the last collection, counters stay running
totals, and nothing observed is lost: the run's last record collects whatever the skipped boundaries left.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from otel_bridge import Bridge

STEPS = 8


def test_instruments_are_collected_every_nth_step_and_nothing_is_lost(tmp_path: Path) -> None:
    config = {
        "trackers": [{"type": "jsonl"}],
        "run": {"name": "every", "dir": str(tmp_path)},
        "otel": {"collect_every": 3},
    }
    with Bridge.from_config(config) as bridge:
        meter = bridge.meter("trainer")
        tokens = meter.create_counter("tokens")
        latency = meter.create_histogram("latency")
        for step in range(STEPS):
            with bridge.step(step):
                tokens.add(10)
                latency.record(float(step))
                bridge.log({"actor/loss": float(step)}, step=step)
    lines = (tmp_path / "every" / "metrics.jsonl").read_text().splitlines()
    records = {r["step"]: r for r in map(json.loads, lines)}
    assert [r["actor/loss"] for r in records.values()] == [float(s) for s in range(STEPS)]
    collected = [s for s in range(STEPS) if "tokens" in records[s]]
    assert collected == [0, 3, 6, 7]  # the 1st, every 3rd, and the run's last (it collects what 7 observed)
    assert [records[s]["tokens"] for s in collected] == [10.0, 40.0, 70.0, 80.0]
    assert [records[s]["latency/count"] for s in collected] == [1.0, 3.0, 3.0, 1.0]
    assert [records[s]["latency/sum"] for s in collected] == [0.0, 1 + 2 + 3, 4 + 5 + 6, 7.0]
    assert sum(records[s]["latency/count"] for s in collected) == STEPS


def test_every_step_collects_by_default(tmp_path: Path) -> None:
    config = {"trackers": [{"type": "jsonl"}], "run": {"name": "each", "dir": str(tmp_path)}}
    with Bridge.from_config(config) as bridge:
        latency = bridge.meter("trainer").create_histogram("latency")
        for step in range(4):
            with bridge.step(step):
                latency.record(1.0)
    records = [json.loads(line) for line in (tmp_path / "each" / "metrics.jsonl").read_text().splitlines()]
    assert [r["latency/count"] for r in records] == [1.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize("send", ["collect", "commit"])
def test_a_record_sent_by_collect_or_commit_collects_what_its_skipped_boundary_left(tmp_path: Path, send: str) -> None:
    """Issue 27 finding 14: with ``collect()`` or ``commit()`` after every step, the run's last record had no
    instrument keys and the histogram counted 9 of 10 observations. A record sent explicitly is final (nothing can be
    added to it, and the bridge cannot know that no step follows), so it collects what its skipped boundary left."""
    config = {
        "trackers": [{"type": "jsonl"}],
        "run": {"name": send, "dir": str(tmp_path)},
        "otel": {"collect_every": 4},
    }
    with Bridge.from_config(config) as bridge:
        latency = bridge.meter("trainer").create_histogram("latency")
        for step in range(10):
            latency.record(1.0)
            bridge.log({"actor/loss": float(step)}, step=step)
            if send == "collect":
                bridge.collect(step)
            else:
                bridge.commit()
    lines = (tmp_path / send / "metrics.jsonl").read_text().splitlines()
    records = {r["step"]: r for r in map(json.loads, lines)}
    assert sorted(records) == list(range(10))
    assert "latency/count" in records[9]
    assert sum(r.get("latency/count", 0.0) for r in records.values()) == 10.0
