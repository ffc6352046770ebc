"""The vllm preset over the real vLLM 0.32 captures: a step whose window starts at the "before" capture and ends at the
"after" capture (20 requests of 16 tokens) reports what the two captures imply, computed here independently from the
raw text."""

from __future__ import annotations

import math
import re
import threading
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_bridge import Bridge
from otel_bridge.tools.simulation.http import MetricsHTTPServer
from tests.conftest import FIXTURES

SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)$")


def parse(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """A deliberately naive parse of the capture, independent of otel_bridge's parser."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if line.startswith("#") or match is None:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"] or ""))
        samples[match["name"]].append((labels, float(match["value"])))
    return samples


def total(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    return math.fsum(v for _, v in samples[name])


def quantile(q: float, buckets: dict[float, float]) -> float:
    """Textbook linear interpolation inside the bucket holding rank q * count (lowest bucket starts at 0)."""
    bounds = sorted(buckets)
    count = buckets[math.inf]
    rank = q * count
    lower, below = 0.0, 0.0
    for bound in bounds:
        if buckets[bound] >= rank:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * (rank - below) / (buckets[bound] - below)
        lower, below = bound, buckets[bound]
    raise AssertionError("unreachable: the +Inf bucket holds every observation")


class SwitchableEndpoint:
    """Serves one text, then another; counts scrapes."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.scrapes = 0
        self._cond = threading.Condition()
        self.server = MetricsHTTPServer(self._render)

    def _render(self) -> bytes:
        with self._cond:
            self.scrapes += 1
            self._cond.notify_all()
            return self.text.encode()

    def wait_for_scrapes(self, count: int) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self.scrapes >= count, 10), f"{self.scrapes} scrapes, expected {count}"


@pytest.fixture
def captures() -> tuple[str, str]:
    if not FIXTURES.is_dir():
        pytest.fail(f"the vLLM captures are missing: expected {FIXTURES} (copied from shared/fixtures/vllm)")
    return (
        (FIXTURES / "metrics-before-requests.txt").read_text(),
        (FIXTURES / "metrics-after-requests.txt").read_text(),
    )


@pytest.fixture
def endpoint(captures: tuple[str, str]) -> Iterator[SwitchableEndpoint]:
    served = SwitchableEndpoint(captures[0])
    served.server.start()
    try:
        yield served
    finally:
        served.server.stop()


def test_vllm_preset_reports_what_the_captures_imply(
    tmp_path: Path, captures: tuple[str, str], endpoint: SwitchableEndpoint
) -> None:
    before, after = (parse(text) for text in captures)
    config = {
        "scrape": {"targets": [endpoint.server.url], "sample_interval_s": 0},
        "metrics": [{"preset": "vllm"}],
        "run": {"name": "captures", "dir": str(tmp_path)},
    }
    with Bridge.from_config(config) as bridge:
        base = endpoint.scrapes
        with bridge.step(0):
            endpoint.wait_for_scrapes(base + 1)  # the start boundary saw the "before" capture
            endpoint.text = captures[1]
        record = bridge.collect(0)

    def delta(name: str) -> float:
        return total(after, name) - total(before, name)

    assert record["rollout/vllm/generation_tokens_total/delta"] == delta("vllm:generation_tokens_total") == 320
    assert record["rollout/vllm/prompt_tokens_total/delta"] == delta("vllm:prompt_tokens_total") == 126
    assert record["rollout/vllm/request_success_total/delta"] == delta("vllm:request_success_total") == 20
    assert record["rollout/vllm/num_preemptions_total/delta"] == delta("vllm:num_preemptions_total")
    # a gauge's one reading taken inside the step without in-step sampling: its start's (0 in both captures)
    assert record["rollout/vllm/num_requests_running/last"] == total(before, "vllm:num_requests_running")
    assert "rollout/vllm/prefix_cache_hit_rate" in record
    assert record["rollout/vllm/prefix_cache_hit_rate"] == delta("vllm:prefix_cache_hits_total") / delta(
        "vllm:prefix_cache_queries_total"
    )
    for family in (
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
    ):
        key = "rollout/" + family.replace(":", "/")
        count = delta(f"{family}_count")
        assert count > 0, family
        assert record[f"{key}/mean"] == pytest.approx(delta(f"{family}_sum") / count, rel=1e-12)
        buckets: dict[float, float] = defaultdict(float)
        for name, sign in ((after, 1.0), (before, -1.0)):
            for labels, value in name[f"{family}_bucket"]:
                buckets[float(labels["le"])] += sign * value
        for stat, q in (("p50", 0.5), ("p99", 0.99)):
            if f"{key}/{stat}" in record:
                expected = quantile(q, buckets)
                if buckets[min(buckets)] == count:
                    # every observation in the lowest bucket: the k-th smallest of n values >= 0 summing to S is at
                    # most S / (n - k + 1); the 20 queue times (0.00096 s in all) make p99 <= 0.00096 s, not 0.297 s
                    k = math.ceil(q * count)
                    expected = min(expected, delta(f"{family}_sum") / (count - k + 1))
                assert record[f"{key}/{stat}"] == pytest.approx(expected, rel=1e-12), (family, stat)
        if f"{key}/count" in record:
            assert record[f"{key}/count"] == count
    assert record["rollout/vllm/time_to_first_token_seconds/count"] == 20
    assert record["rollout/vllm/request_queue_time_seconds/p99"] == pytest.approx(0.000959310000325786, rel=1e-12)
