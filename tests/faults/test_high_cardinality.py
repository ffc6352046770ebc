"""A ``by:`` label with 19,000 values (under ``scrape.max_series``) on the scrape path (issue 27, finding 5): each
record holds at most ``max_groups`` label groups of that metric, the groups beyond it are summed into one ``_other``
group so the metric's total stays exact, the health key ``otel_bridge/groups_dropped/metric.<key>`` counts them,
one WARNING names the metric, the count, the bound and the key to raise, and the healthy metric is in every record.
The PromQL path, against a real Prometheus (2.42 and 3.16) scraping the same page, bounds the metric the same way."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest

from otel_bridge import Bridge
from tests.faults.support import base_config, count_logs
from tests.helpers.backends import BackendDouble
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer
from tests.helpers.prometheus_server import PrometheusServer

pytestmark = [
    pytest.mark.integration,
    pytest.mark.sleeps(
        10, reason="five PromQL steps of 1.5 s, longer than the scrape interval: every window holds samples"
    ),
]

VALUES = 19_000
TOKENS = "vllm:generation_tokens_total"
RUNNING = "vllm:num_requests_running"
PER_LORA = "rollout/vllm/generation_tokens_total/delta/"
TOTAL = "rollout/tokens_all/delta"
HEALTHY = "rollout/vllm/num_requests_running/last"
DROPPED = "otel_bridge/groups_dropped/metric.vllm_generation_tokens_total"


class ManyAdapters:
    """A /metrics page with one counter per LoRA adapter (19,000 values of ``lora``): every scrape, adapter ``i``
    has counted ``1 + i % 7`` more tokens, so each group's increase differs and the total is known."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._received: list[float] = []  # when each scrape arrived
        self.server = ScriptedHTTPServer(self._answer)

    def wait_for_scrapes_after(self, t: float, count: int, timeout_s: float = 60.0) -> None:
        """Wait until ``count`` scrapes have arrived after ``t``. A target's scrapes never overlap, so with two the
        second was sent after ``t``: a step that began before ``t`` has a reading of its own for its start, and its
        end's reading, sent after the step ends, is another one (a page this size takes long to render and parse on
        a loaded machine, longer than a fixed short step)."""
        with self._changed:
            if not self._changed.wait_for(lambda: sum(r > t for r in self._received) >= count, timeout_s):
                raise TimeoutError(f"fewer than {count} scrapes of the page within {timeout_s} s")

    def _answer(self, _request: RecordedRequest) -> Response:
        with self._changed:
            self._received.append(time.time())
            n = len(self._received)
            self._changed.notify_all()
        lines = [f"# TYPE {TOKENS} counter\n"]
        lines.extend(f'{TOKENS}{{lora="a{i:05d}"}} {n * (1 + i % 7)}\n' for i in range(VALUES))
        lines.append(f"# TYPE {RUNNING} gauge\n{RUNNING} 3\n")
        return Response(body="".join(lines).encode(), headers={"Content-Type": "text/plain; version=0.0.4"})


METRICS = [
    {"name": TOKENS, "type": "counter", "stats": ["delta"], "by": ["lora"]},
    {"name": TOKENS, "type": "counter", "stats": ["delta"], "alias": "tokens_all"},
    {"name": RUNNING, "type": "gauge", "stats": ["last"]},
]


def run(tmp_path: Path, steps: int, **extra: object) -> dict[int, dict[str, float]]:
    page = ManyAdapters()
    collecting = BackendDouble()
    scrape = {"targets": [f"127.0.0.1:{page.server.port}"], "sample_interval_s": 0.5, "timeout_s": 10}
    config = base_config(tmp_path, "many", scrape=scrape, metrics=METRICS, **extra)
    config["delivery"] = {"produce_timeout_s": 30}
    try:
        with Bridge.from_config(config, backends=[collecting]) as bridge:
            for step in range(steps):
                with bridge.step(step):
                    page.wait_for_scrapes_after(time.time(), 2)
                bridge.collect(step)
    finally:
        page.server.close()
    return collecting.by_step()


def test_a_high_cardinality_label_is_bounded_per_record_with_the_rest_folded_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="otel_bridge")
    records = run(tmp_path, 6)
    assert sorted(records) == list(range(6))
    kept: set[str] | None = None
    for step in range(1, 6):
        record = records[step]
        assert record[HEALTHY] == 3.0, f"step {step}: the healthy metric is missing"
        groups = {k: v for k, v in record.items() if k.startswith(PER_LORA)}
        assert len(groups) == 100, f"step {step}: {len(groups)} keys of one metric (bound: max_groups = 100)"
        other = f"{PER_LORA}lora._other"
        assert other in groups
        # The whole metric's total stays exact: the kept groups plus the folded ones equal the unbounded total.
        assert sum(groups.values()) == pytest.approx(record[TOTAL], rel=1e-12)
        assert record[TOTAL] > 0
        # The first 99 label values in order are kept, the same ones every step (a tracker's plots stay whole).
        assert sorted(groups) == sorted([*(f"{PER_LORA}lora.a{i:05d}" for i in range(99)), other])
        names = set(groups)
        assert kept is None or names == kept
        kept = names
        assert record[DROPPED] == VALUES - 99
    assert count_logs(caplog, "max_groups") == 1
    warning = next(r.getMessage() for r in caplog.records if "max_groups" in r.getMessage())
    assert TOKENS in warning
    assert f"{VALUES - 99} groups" in warning
    assert "bound of 100" in warning
    assert "metrics[0].max_groups" in warning


def test_max_groups_is_a_config_key(tmp_path: Path) -> None:
    """``max_groups`` at the top level sets the bound for every metric; a metric entry's own overrides it."""
    records = run(tmp_path, 3, max_groups=10)
    record = records[2]
    groups = {k: v for k, v in record.items() if k.startswith(PER_LORA)}
    assert len(groups) == 10
    assert sum(groups.values()) == pytest.approx(record[TOTAL], rel=1e-12)
    assert record[DROPPED] == VALUES - 9


def test_the_promql_path_bounds_the_same_metric(tmp_path: Path, prometheus_version: str) -> None:
    """A real Prometheus scraping the same page: the PromQL path's records hold the same bounded groups, whose total
    is the whole metric's increase as Prometheus computes it."""
    page = ManyAdapters()
    prometheus = PrometheusServer(
        tmp_path / "prom", targets=[f"127.0.0.1:{page.server.port}"], scrape_interval_s=1.0, version=prometheus_version
    )
    collecting = BackendDouble()
    config = base_config(
        tmp_path,
        "many-promql",
        prometheus={"url": prometheus.url, "scrape_interval_s": 1, "boundary": "samples", "timeout_s": 20},
        metrics=METRICS,
        delivery={"produce_timeout_s": 60},
    )
    try:
        prometheus.start()
        deadline = time.monotonic() + 60
        while not prometheus.query(f"count_over_time({RUNNING}[1m]) >= 2"):
            assert time.monotonic() < deadline, "Prometheus does not scrape the page"
            time.sleep(0.2)
        with Bridge.from_config(config, backends=[collecting]) as bridge:
            for step in range(5):
                with bridge.step(step):
                    time.sleep(1.5)  # longer than the scrape interval: every window holds samples
                bridge.collect(step)
    finally:
        prometheus.stop()
        page.server.close()
    records = collecting.by_step()
    counted = 0
    for step in range(1, 5):
        record = records[step]
        assert record[HEALTHY] == 3.0
        groups = {k: v for k, v in record.items() if k.startswith(PER_LORA)}
        assert len(groups) <= 100
        if TOTAL not in record:
            continue  # a window without two samples of the counter has no increase
        counted += 1
        assert len(groups) == 100
        assert f"{PER_LORA}lora._other" in groups
        assert sum(groups.values()) == pytest.approx(record[TOTAL], rel=1e-9)
        assert record[DROPPED] == VALUES - 99
    assert counted >= 2
