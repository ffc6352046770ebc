"""Issue 26: a healthy run shows no fault counts. A window (a step's or a phase's) in which the servers observed
nothing has no histogram mean or quantile and no prefix-cache hit rate; that is not a non-finite value, so
``otel_bridge/nonfinite_values`` stays 0 (a real NaN is still counted: tests/unit/test_health_instruments.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from otel_bridge import Bridge
from tests.conftest import Replica

NONFINITE = "otel_bridge/nonfinite_values"


def test_empty_windows_are_not_counted_as_nonfinite_values(tmp_path: Path, replicas: list[Replica]) -> None:
    config = {
        "scrape": {"targets": [r.hostport for r in replicas], "sample_interval_s": 0.2},
        "metrics": [{"preset": "vllm"}],  # histograms (TTFT, ITL, e2e, queue) and the prefix-cache ratio
        "trackers": [{"type": "jsonl"}],
        "run": {"dir": str(tmp_path), "name": "healthy"},
    }
    with Bridge.from_config(config) as bridge:
        bridge.log({"actor/loss": 1.0}, step=0)
        for step in (1, 2):
            with bridge.phase("gen"):  # requests finish: every statistic has a value
                for replica in replicas:  # the bridge has read the phase's start (as in test_phases.py)
                    replica.wait_for_scrapes(replica.scrapes + 2)
                for replica in replicas:
                    replica.sim.complete_request(
                        prompt_tokens=8, generation_tokens=4, ttft_s=0.05, e2e_s=0.2, queue_s=0.01, itl_s=0.01
                    )
                time.sleep(0.5)
            with bridge.phase("update_actor"):  # nothing is served: an empty window
                time.sleep(0.5)
            bridge.log({"actor/loss": 1.0 / step}, step=step)
        bridge.log({"actor/loss": 0.1}, step=3)
    records = {r["step"]: r for r in map(json.loads, (tmp_path / "healthy" / "metrics.jsonl").read_text().splitlines())}
    for step in (0, 1, 2, 3):
        assert records[step][NONFINITE] == 0, (step, records[step])
    # the empty phase has counts, no mean or quantile; the busy phase has both
    record = records[2]
    assert record["phase/update_actor/rollout/vllm/time_to_first_token_seconds/count"] == 0
    assert not [
        k for k in record if k.startswith("phase/update_actor/") and k.endswith(("_seconds/mean", "_seconds/p99"))
    ]
    assert record["phase/gen/rollout/vllm/time_to_first_token_seconds/count"] == len(replicas)
    assert record["phase/gen/rollout/vllm/time_to_first_token_seconds/mean"] == 0.05
