"""The Bridge facade: step windows, ordering rules, trainer values, OTel instruments, missing metrics."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from otel_bridge import Bridge, BridgeClosedError, StepOrderError
from otel_bridge.exporters.tracker import FIRST_STEP_NOTE
from tests.conftest import Replica


@pytest.fixture
def replica() -> Iterator[Replica]:
    r = Replica()
    try:
        yield r
    finally:
        r.stop()


def scrape_config(tmp_path: Path, replica: Replica, metrics: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "scrape": {"targets": [replica.url], "sample_interval_s": 0},
        "metrics": metrics if metrics is not None else [{"preset": "vllm"}],
        "trackers": [{"type": "jsonl"}],
        "run": {"name": "t", "dir": str(tmp_path)},
    }


def request(replica: Replica, tokens: int) -> None:
    replica.sim.complete_request(
        prompt_tokens=10, generation_tokens=tokens, ttft_s=0.05, e2e_s=0.2, queue_s=0.01, itl_s=0.01
    )


def test_log_without_step_first_record_has_no_baseline(tmp_path: Path, replica: Replica) -> None:
    replica.sim.set_running(3)
    with Bridge.from_config(scrape_config(tmp_path, replica)) as bridge:
        request(replica, 7)
        scrapes = replica.scrapes
        bridge.log({"actor/loss": 1.0}, step=0)
        replica.wait_for_scrapes(scrapes + 1)  # the boundary scrape happens right after the boundary
        request(replica, 11)
        bridge.log({"actor/loss": 0.5}, step=1)
        first, second = bridge.collect(0), bridge.collect(1)
        first_record = bridge.record(0)
    assert first_record is not None
    assert first_record.notes == (FIRST_STEP_NOTE,)
    assert not [k for k in first if k.endswith(("/delta", "/rate", "/p99"))], "no counter statistics without a baseline"
    assert first["rollout/vllm/num_requests_running/last"] == 3
    assert second["rollout/vllm/generation_tokens_total/delta"] == 11
    assert second["actor/loss"] == 0.5
    lines = [json.loads(line) for line in (tmp_path / "t" / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["_notes"] == [FIRST_STEP_NOTE]
    assert lines[0]["window_start"] is None
    assert "_notes" not in lines[1]


def test_step_block_has_a_complete_first_window(tmp_path: Path, replica: Replica) -> None:
    with Bridge.from_config(scrape_config(tmp_path, replica)) as bridge:
        scrapes = replica.scrapes
        with bridge.step(0):
            replica.wait_for_scrapes(scrapes + 1)
            request(replica, 5)
            request(replica, 6)
            bridge.log({"actor/loss": 2.0}, step=0)
        record = bridge.collect(0)
    assert record["rollout/vllm/generation_tokens_total/delta"] == 11
    assert record["rollout/vllm/request_success_total/delta"] == 2
    assert record["rollout/vllm/time_to_first_token_seconds/count"] == 2
    assert record["actor/loss"] == 2.0


def test_steps_must_increase_and_not_nest(tmp_path: Path) -> None:
    with Bridge.from_config({"run": {"name": "o", "dir": str(tmp_path)}}) as bridge:
        bridge.log({"x": 1}, step=3)
        bridge.log({"y": 2}, step=3)  # the record of step 3 is still open: it joins
        with pytest.raises(StepOrderError, match="steps must increase"):
            bridge.log({"x": 1}, step=2)
        assert {"x": 1.0, "y": 2.0}.items() <= bridge.collect(3).items()
        with pytest.raises(StepOrderError, match="step 3 comes after step 3"):
            bridge.log({"x": 1}, step=3)  # collect() sent the record: step 3 is closed now
        with bridge.step(4):
            with pytest.raises(StepOrderError, match="use the same step"):
                bridge.log({"x": 1}, step=5)
            with pytest.raises(StepOrderError, match="do not nest"), bridge.step(5):
                pass
        assert bridge.collect(4) == {
            "otel_bridge/backend_errors/backend.jsonl": 0.0,
            "otel_bridge/infra_unavailable": 0.0,
            "otel_bridge/nonfinite_values": 0.0,
        }


def test_closed_bridge_refuses_new_steps(tmp_path: Path) -> None:
    bridge = Bridge.from_config({"run": {"name": "c", "dir": str(tmp_path)}})
    bridge.close()
    bridge.close()  # idempotent
    with pytest.raises(BridgeClosedError, match="closed"):
        bridge.log({"x": 1.0}, step=0)


def test_otel_instruments_and_trainer_dict_share_the_record(tmp_path: Path) -> None:
    with Bridge.from_config({"run": {"name": "i", "dir": str(tmp_path)}}) as bridge:
        meter = bridge.meter("trainer")
        tokens = meter.create_counter("trainer.tokens")
        latency = meter.create_histogram("trainer.update_seconds")
        bridge.log({"actor/loss": 1.5}, step=0)  # no instrument has recorded anything yet
        tokens.add(100, {"role": "actor"})
        latency.record(0.25)
        latency.record(0.75)
        bridge.log({"actor/loss": np.float32(0.5), "actor/lr": np.array(3e-4)}, step=1)
        tokens.add(50, {"role": "actor"})
        bridge.log({}, step=2)
        records = [bridge.collect(s) for s in range(3)]
    assert records[0]["actor/loss"] == 1.5
    assert not [k for k in records[0] if k.startswith("trainer.")]
    assert records[1]["trainer/tokens/role.actor"] == 100
    assert records[1]["trainer/update_seconds/count"] == 2
    assert records[1]["trainer/update_seconds/mean"] == pytest.approx(0.5)
    assert records[1]["actor/loss"] == 0.5
    assert records[1]["actor/lr"] == pytest.approx(3e-4)
    assert records[2]["trainer/tokens/role.actor"] == 150  # counters are cumulative
    assert "trainer/update_seconds/mean" not in records[2]  # no observation during step 2


def test_non_numbers_are_skipped_with_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="otel_bridge")
    with Bridge.from_config({"run": {"name": "n", "dir": str(tmp_path)}}) as bridge:
        for step in range(3):
            bridge.log({"ok": 1.0, "text": "hello", "nan": float("nan")}, step=step)
        record = bridge.collect(2)
    assert "ok" in record
    assert "text" not in record
    assert "nan" not in record
    texts = [r.getMessage() for r in caplog.records]
    assert sum("'text' is a str, not a number" in t for t in texts) == 1
    assert sum("'nan' is nan" in t for t in texts) == 1


def test_missing_metric_is_named_once_and_counted(
    tmp_path: Path, replica: Replica, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="otel_bridge")
    metrics = [
        {"name": "vllm:generation_tokens_total", "type": "counter"},
        {"name": "vllm:generation_tokens_totl", "type": "counter"},
    ]
    with Bridge.from_config(scrape_config(tmp_path, replica, metrics)) as bridge:
        base = replica.scrapes  # sample_interval_s=0: from here on, one scrape per boundary waited for
        for step in range(4):
            with bridge.step(step):
                replica.wait_for_scrapes(base + 2 * step + 1)  # this step's start boundary was scraped
                request(replica, 3)
            # its end boundary too, before the next step begins (two boundaries queued together share a scrape)
            replica.wait_for_scrapes(base + 2 * step + 2)
        records = [bridge.collect(s) for s in range(4)]
    assert all(r["otel_bridge/missing_metrics"] == 1 for r in records)
    assert all(r["rollout/vllm/generation_tokens_total/delta"] == 3 for r in records)
    named = [r for r in caplog.records if "vllm:generation_tokens_totl" in r.getMessage()]
    assert len(named) == 1, [r.getMessage() for r in named]
    assert named[0].levelno == logging.WARNING


def test_only_the_delivering_rank_touches_trackers_and_infrastructure(tmp_path: Path) -> None:
    config = {
        "prometheus": {"url": "http://127.0.0.1:1", "retries": 0},  # would fail at start-up on rank 0
        "metrics": [{"preset": "vllm"}],
        "run": {"name": "rank1", "dir": str(tmp_path)},
        "otel": {"rank": 1},
    }
    with Bridge.from_config(config) as bridge:
        assert bridge.rank == 1
        assert not bridge.delivers
        bridge.log({"actor/loss": 1.0}, step=0)
        assert bridge.collect(0)["actor/loss"] == 1.0
    assert not (tmp_path / "rank1").exists(), "a non-delivering rank writes no tracker files"
