"""Phases against real servers: each phase's window statistics equal the traffic the test generates inside it.

Two simulated vLLM replicas (tests/conftest.py). Each step has a ``gen`` phase (requests finish on both replicas, KV
cache busy), a gap (traffic that belongs to the step but to no phase) and an ``update`` phase (KV cache idle, one
small request), so a per-phase delta that leaked into a neighbour, or a step total that lost a phase, shows.

- Scrape path: the sampler scrapes at each boundary; the test waits until the bridge has each replica's reading of the
  boundary (a replica serving two more scrapes after the one under way at the boundary: a target's scrapes never
  overlap, so the first one sent after the boundary has then been answered) before generating traffic, so each
  completion lies on a known side of every boundary's reading: exact.
- PromQL path: a real Prometheus scrapes every 1 s; around every boundary the test keeps quiet until Prometheus has
  scraped both replicas since (by its own timestamps), so Prometheus sees every state, and after a boundary also
  until the bridge's own boundary scrape of each replica (``boundary: auto`` reads the counters' boundaries so) was
  rendered: its child process runs at a low priority and, on a loaded machine, was seen to read a phase's start after
  the phase's traffic (0 of 231 tokens). Exact, but for one case the record reports: a phase start while the reading
  of the boundary before it is still under way shares that reading (cc39: the gen end's, rendered before the gap's
  request and taken by the starved child after the update began put the gap's 7 tokens in update), so the gap's
  request may be in update when the record's lag reaches back to it (a quiet spell lies between them).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from otel_bridge import Bridge
from tests.conftest import Replica
from tests.helpers.prometheus_server import PrometheusServer

METRICS: list[dict[str, Any]] = [
    {"name": "vllm:generation_tokens_total", "type": "counter", "stats": ["delta"]},
    {"name": "vllm:request_success_total", "type": "counter", "stats": ["delta"]},
    {"name": "vllm:kv_cache_usage_perc", "type": "gauge", "stats": ["max"]},
    {"name": "vllm:time_to_first_token_seconds", "type": "histogram", "stats": ["count", "p50"]},
]
TOKENS = "rollout/vllm/generation_tokens_total/delta"
REQUESTS = "rollout/vllm/request_success_total/delta"
KV_MAX = "rollout/vllm/kv_cache_usage_perc/max"
TTFT_COUNT = "rollout/vllm/time_to_first_token_seconds/count"
TTFT_P50 = "rollout/vllm/time_to_first_token_seconds/p50"


LAG = "otel_bridge/boundary_lag_s"


@dataclass
class Truth:
    tokens: dict[str, int] = field(default_factory=lambda: {"gen": 0, "gap": 0, "update": 0})
    requests: dict[str, int] = field(default_factory=lambda: {"gen": 0, "gap": 0, "update": 0})
    gap_to_update_s: float = 0.0
    """From the gap's request completing to just before the update phase began."""


def finish(replica: Replica, truth: Truth, part: str, tokens: int, ttft_s: float = 0.03) -> None:
    replica.sim.complete_request(
        prompt_tokens=16, generation_tokens=tokens, ttft_s=ttft_s, e2e_s=ttft_s + 0.2, queue_s=0.0, itl_s=0.001
    )
    truth.tokens[part] += tokens
    truth.requests[part] += 1


def run_step(
    bridge: Bridge, step: int, replicas: list[Replica], settle: Callable[[], None], hold: Callable[[], None]
) -> Truth:
    """One step: gen, gap, update; ``settle()`` after every boundary, before any traffic; ``hold()`` after the traffic
    of a phase or of the gap, before the boundary after it."""
    truth = Truth()
    with bridge.step(step):
        settle()
        with bridge.phase("gen"):
            settle()
            for k in range(3):
                finish(replicas[0], truth, "gen", 40 + 10 * step + k)
                finish(replicas[1], truth, "gen", 25 + k)
            for replica in replicas:
                replica.sim.set_kv_cache_usage(0.75)
            hold()
        settle()
        for replica in replicas:
            replica.sim.set_kv_cache_usage(0.0)  # rollout done: the KV cache is idle from here on
        finish(replicas[1], truth, "gap", 7)
        completed = time.time()
        hold()
        entering = time.time()
        truth.gap_to_update_s = entering - completed
        with bridge.phase("update"):
            settle()
            finish(replicas[0], truth, "update", 2, ttft_s=0.5)
            hold()
        settle()
    settle()
    return truth


def check(record: dict[str, float], truth: Truth) -> None:
    assert record[f"phase/gen/{TOKENS}"] == truth.tokens["gen"]
    assert record[f"phase/gen/{REQUESTS}"] == truth.requests["gen"]
    assert record[f"phase/gen/{TTFT_COUNT}"] == truth.requests["gen"]
    # The update phase's start is read at or after it, after the gap's request completed: outside the phase. Unless the
    # reading standing for it is the gen phase's end's, still being taken when update began (a start while the reading
    # of the boundary before it is under way: otel_bridge/producers/scrape/_internal/readings.py), rendered before the
    # gap's request on a machine that answered it late: then the record's lag reaches back past that request.
    leaked = record.get(LAG, 0.0) >= truth.gap_to_update_s
    gap = (truth.tokens["gap"], truth.requests["gap"]) if leaked else (0, 0)
    assert truth.tokens["update"] <= record[f"phase/update/{TOKENS}"] <= truth.tokens["update"] + gap[0], record
    assert truth.requests["update"] == 1
    assert 1 <= record[f"phase/update/{REQUESTS}"] <= 1 + gap[1], record
    assert 1 <= record[f"phase/update/{TTFT_COUNT}"] <= 1 + gap[1], record
    if not leaked:
        assert 0.25 < record[f"phase/update/{TTFT_P50}"] <= 0.5  # the one slow request's bucket, not gen's fast ones
    assert record[f"phase/gen/{TTFT_P50}"] <= 0.05
    # KV cache: busy during gen, idle during the whole update phase (summed over the two replicas)
    assert record[f"phase/gen/{KV_MAX}"] == pytest.approx(1.5)
    assert record[f"phase/update/{KV_MAX}"] == 0.0
    # the step counts its phases and its gap: phases are windows inside the step, not a partition of it
    assert record[TOKENS] == sum(truth.tokens.values())
    assert record[REQUESTS] == sum(truth.requests.values())
    assert record[KV_MAX] == pytest.approx(1.5)
    gen_s, update_s = record["phase/gen/seconds"], record["phase/update/seconds"]
    assert gen_s > 0
    assert update_s > 0
    assert gen_s + update_s <= record["time"] - record["window_start"]


def values(bridge: Bridge, step: int) -> dict[str, float]:
    record = bridge.record(step)
    assert record is not None
    assert record.window_start is not None
    return {**record.values, "time": record.time, "window_start": record.window_start}


def test_phase_windows_count_the_traffic_inside_each_phase_on_the_scrape_path(
    tmp_path: Path, replicas: list[Replica]
) -> None:
    config = {
        "metrics": METRICS,
        "scrape": {"targets": [r.url for r in replicas], "sample_interval_s": 0.05},
        "run": {"name": "phases-scrape", "dir": str(tmp_path)},
    }

    def settle() -> None:  # the bridge has every replica's reading of the boundary just made
        counts = [replica.scrapes for replica in replicas]
        for replica, count in zip(replicas, counts, strict=True):
            replica.wait_for_scrapes(count + 3)

    def sampled() -> None:  # a reading of every replica sent after the phase's traffic, inside the phase
        counts = [replica.scrapes for replica in replicas]
        for replica, count in zip(replicas, counts, strict=True):
            replica.wait_for_scrapes(count + 2)

    with Bridge.from_config(config) as bridge:
        truths = [run_step(bridge, step, replicas, settle, sampled) for step in range(3)]
    for step, truth in enumerate(truths):
        check(values(bridge, step), truth)


def asked_by_the_bridge(accept: str) -> bool:
    """Whether a scrape's ``Accept`` is the bridge's: a Prometheus asks for OpenMetrics first, the bridge for the text
    format."""
    return not accept.startswith("application/openmetrics-text")


@pytest.mark.integration
def test_phase_windows_count_the_traffic_inside_each_phase_on_the_promql_path(
    tmp_path: Path, replicas: list[Replica], prometheus: PrometheusServer
) -> None:
    config = {
        "metrics": METRICS,
        "prometheus": {"url": prometheus.url, "scrape_interval_s": 1},
        "run": {"name": "phases-promql", "dir": str(tmp_path)},
    }

    def settle() -> None:  # Prometheus and the bridge have every replica's state at the boundary just made
        boundary = time.time()
        prometheus.wait_for_scrapes_after(boundary)
        for replica in replicas:
            replica.renders.wait_after(boundary, by=asked_by_the_bridge)

    with Bridge.from_config(config) as bridge:
        quiet = lambda: prometheus.wait_for_scrapes_after(time.time())  # noqa: E731
        truths = [run_step(bridge, step, replicas, settle, quiet) for step in range(2)]
    for step, truth in enumerate(truths):
        check(values(bridge, step), truth)


REPEAT_METRICS: list[dict[str, Any]] = [
    {"name": "vllm:generation_tokens_total", "type": "counter", "stats": ["delta", "rate"]},
    {"name": "vllm:kv_cache_usage_perc", "type": "gauge", "stats": ["max"]},
    {"name": "vllm:time_to_first_token_seconds", "type": "histogram", "stats": ["count", "mean", "p50"]},
    {
        "name": "vllm:num_requests_running",
        "type": "gauge",
        "stats": ["idle_seconds"],
        "agg": "sum",
        "full_scale": 1,
        "alias": "vllm:num_requests_running:servers",
    },
]
IDLE = "rollout/vllm/num_requests_running/servers/idle_seconds"


@pytest.mark.parametrize("repeats", ["sum", "each"])
def test_a_phase_repeated_in_a_step_is_one_key_over_its_occurrences_or_one_key_each_on_request(
    tmp_path: Path, replicas: list[Replica], repeats: str
) -> None:
    """Issue 39: verl's fully asynchronous trainer waits for samples once per local update, several times per logged
    step. By default the step's record has one ``phase/gen/...`` key per figure, over all the occurrences: tokens
    added, the KV cache's max the largest, the TTFT count and mean those of all requests, the idle server-seconds
    added (replica 1 never runs a request: it is idle for every second of every ``gen``). A quantile is not known
    from the occurrences' quantiles: it is in the per-occurrence keys only."""
    config = {
        "metrics": REPEAT_METRICS,
        "scrape": {"targets": [r.url for r in replicas], "sample_interval_s": 0.05},
        "run": {"name": f"repeats-{repeats}", "dir": str(tmp_path)},
        "naming": {"phase_repeats": repeats},
    }

    def settle() -> None:
        counts = [replica.scrapes for replica in replicas]
        for replica, count in zip(replicas, counts, strict=True):
            replica.wait_for_scrapes(count + 3)

    occurrences = [(30, 0.5, 0.03), (12, 0.25, 0.3)]  # tokens, KV cache use, TTFT of each gen's one request
    with Bridge.from_config(config) as bridge:
        bridge.log({"x": 0.0}, step=0)
        settle()
        for tokens, kv, ttft in occurrences:
            replicas[0].sim.set_running(1)
            settle()
            with bridge.phase("gen"):
                settle()
                replicas[0].sim.complete_request(
                    prompt_tokens=4, generation_tokens=tokens, ttft_s=ttft, e2e_s=ttft + 0.1, queue_s=0.0, itl_s=0.001
                )
                replicas[0].sim.set_kv_cache_usage(kv)
                settle()
            settle()
            replicas[0].sim.set_running(0)
            replicas[0].sim.set_kv_cache_usage(0.0)
            with bridge.phase("update_actor"):
                settle()
            settle()
        bridge.log({"x": 1.0}, step=1)
    record = bridge.record(1)
    assert record is not None
    values = record.values
    gen = [k for k in values if k.startswith("phase/gen") and k.endswith("/seconds")]
    if repeats == "each":
        assert sorted(gen) == ["phase/gen/seconds", "phase/gen_2/seconds"]
        for key, (tokens, kv, _) in zip(("gen", "gen_2"), occurrences, strict=True):
            assert values[f"phase/{key}/{TOKENS}"] == tokens
            assert values[f"phase/{key}/{KV_MAX}"] == kv
            assert values[f"phase/{key}/{TTFT_COUNT}"] == 1
            assert values[f"phase/{key}/{TTFT_P50}"] > 0
            assert values[f"phase/{key}/{IDLE}"] == pytest.approx(values[f"phase/{key}/seconds"])
        return
    assert gen == ["phase/gen/seconds"]
    seconds = values["phase/gen/seconds"]
    assert values[f"phase/gen/{TOKENS}"] == 42
    assert values[f"phase/gen/{TOKENS.replace('delta', 'rate')}"] == pytest.approx(42 / seconds)
    assert values[f"phase/gen/{KV_MAX}"] == 0.5
    assert values[f"phase/gen/{TTFT_COUNT}"] == 2
    assert values["phase/gen/rollout/vllm/time_to_first_token_seconds/mean"] == pytest.approx((0.03 + 0.3) / 2)
    assert f"phase/gen/{TTFT_P50}" not in values
    assert values[f"phase/gen/{IDLE}"] == pytest.approx(seconds)  # replica 0 ran a request all along, replica 1 none
    assert values[f"phase/update_actor/{TOKENS}"] == 0
    assert values[f"phase/update_actor/{IDLE}"] == pytest.approx(2 * values["phase/update_actor/seconds"])
    assert values[TOKENS] == 42
