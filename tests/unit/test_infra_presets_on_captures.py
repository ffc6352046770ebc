"""The sglang, ray, dcgm and node presets over their fixtures (see each tests/fixtures/<preset>/README.md for where a
fixture comes from: real Ray 2.60 and node_exporter captures, SGLang 0.5.23 and dcgm-exporter 4.5.3-4.8.2 output
rendered from their sources). A step whose window starts at the "before" text and ends at the "after" text reports,
for every preset entry, what the two texts imply, computed here independently from the raw text: a preset name that
the source does not expose, or exposes with another type, fails here."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from otel_bridge import Bridge
from otel_bridge.config import MetricConfig
from otel_bridge.exporters.naming import infra_key
from otel_bridge.producers.metric_set import resolve_metrics
from otel_bridge.producers.presets import DEPRECATED, PRESETS
from tests.unit.test_preset_on_captures import SwitchableEndpoint, parse, quantile

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
Samples = dict[str, list[tuple[dict[str, str], float]]]
AGG: dict[str, Callable[[Sequence[float]], float]] = {
    "sum": math.fsum,
    "mean": lambda v: math.fsum(v) / len(v),
    "max": max,
    "min": min,
}

# Ray exports these only on nodes with GPUs: the capture (a CPU node) cannot have them; test_ray_preset_names_are_
# ray_gauges checks them against Ray's own definitions instead.
RAY_GPU_ONLY = {"ray_node_gpus_utilization", "ray_node_gram_used"}


def fixture(preset: str, host: str | None = None) -> tuple[str, str]:
    folder = FIXTURES / preset
    texts = [(folder / f"metrics-{phase}.txt").read_text() for phase in ("before", "after")]
    if host is not None:
        texts = [
            t.replace('Hostname="gpu-node-0"', f'Hostname="{host}"').replace('UUID="GPU-', 'UUID="GPU-1') for t in texts
        ]
    return texts[0], texts[1]


def declared_types(text: str) -> dict[str, str]:
    """``# TYPE`` lines: family name -> type (prometheus_client drops a counter's ``_total`` in its family name)."""
    types = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            types[name] = kind
    return types


def group_key(labels: dict[str, str], by: Sequence[str]) -> tuple[tuple[str, str], ...]:
    return tuple((name, labels[name]) for name in by if labels.get(name))


def expected_record(
    entries: Sequence[dict[str, Any]], befores: Sequence[Samples], afters: Sequence[Samples], seconds: float
) -> dict[str, float]:
    """Each entry's statistics from the raw samples: counters and histograms from the per-series increases, gauges from
    the "after" sample of each series (in a window whose one reading is of the "after" texts)."""
    expected: dict[str, float] = {}
    for entry in entries:
        name, by, key_name = entry["name"], list(entry.get("by", [])), entry.get("alias")
        groups: dict[tuple[tuple[str, str], ...], Any] = defaultdict(list)
        if entry["type"] == "gauge":
            for after in afters:
                for labels, value in after[name]:
                    groups[group_key(labels, by)].append(value)
            for group, values in groups.items():
                for stat in entry["stats"]:
                    key = infra_key(name, stat, dict(group), prefix="", alias=key_name)
                    if stat == "idle_seconds":  # each GPU's idle share of the window, from its one in-window sample
                        values = [seconds * (1 - v / entry["full_scale"]) for v in values]
                    expected[key] = AGG[entry["agg"]](values)
        elif entry["type"] == "counter":
            for before, after in zip(befores, afters, strict=True):
                start = {tuple(sorted(labels.items())): value for labels, value in before[name]}
                for labels, value in after[name]:
                    groups[group_key(labels, by)].append(value - start[tuple(sorted(labels.items()))])
            for group, increases in groups.items():
                delta = math.fsum(increases) * entry.get("scale", 1.0)
                values = {"delta": delta, "rate": delta / seconds}
                for stat in entry["stats"]:
                    expected[infra_key(name, stat, dict(group), prefix="", alias=key_name)] = values[stat]
        else:
            buckets: dict[float, float] = defaultdict(float)
            sums = counts = 0.0
            for before, after in zip(befores, afters, strict=True):
                for samples, sign in ((after, 1.0), (before, -1.0)):
                    for labels, value in samples[f"{name}_bucket"]:
                        buckets[float(labels["le"])] += sign * value
                    sums += sign * math.fsum(v for _, v in samples[f"{name}_sum"])
                    counts += sign * math.fsum(v for _, v in samples[f"{name}_count"])
            for stat in entry["stats"]:
                key = infra_key(name, stat, {}, prefix="", alias=key_name)
                if stat == "mean":
                    expected[key] = sums / counts
                elif stat == "count":
                    expected[key] = counts
                else:
                    expected[key] = quantile(float(stat[1:]) / 100, buckets)
    return expected


@pytest.fixture
def endpoints() -> Iterator[list[SwitchableEndpoint]]:
    started: list[SwitchableEndpoint] = []
    try:
        for _ in range(2):
            served = SwitchableEndpoint("")
            served.server.start()
            started.append(served)
        yield started
    finally:
        for served in started:
            served.server.stop()


def run_steps(
    tmp_path: Path, served: Sequence[SwitchableEndpoint], texts: Sequence[tuple[str, str]], metric: dict[str, Any]
) -> tuple[tuple[dict[str, float], float], tuple[dict[str, float], float]]:
    """Step 0 from the "before" texts to the "after" texts, then step 1 on the "after" texts; each record and its
    window's seconds. Step 0's counters and histograms span the two texts; step 1's gauges are the "after" texts',
    from the readings taken inside it at its boundaries and its phase's (no in-step sampling; the reading at a
    window's end is taken after it: the next window's)."""
    for endpoint, (before, _) in zip(served, texts, strict=True):
        endpoint.text = before
    config = {
        "scrape": {"targets": [e.server.url for e in served], "sample_interval_s": 0},
        "metrics": [metric],
        "naming": {"infra_prefix": ""},
        "run": {"name": "captures", "dir": str(tmp_path)},
    }
    steps = []
    with Bridge.from_config(config) as bridge:
        bases = [e.scrapes for e in served]
        with bridge.step(0):
            for endpoint, base, (_, after) in zip(served, bases, texts, strict=True):
                endpoint.wait_for_scrapes(base + 1)  # the start boundary saw the "before" text
                endpoint.text = after
        with bridge.step(1):
            with bridge.phase("held"):
                bases = [e.scrapes for e in served]
                for endpoint, base in zip(served, bases, strict=True):
                    endpoint.wait_for_scrapes(base + 1)  # one reading under way at the phase's start or taken for it
            for endpoint, base in zip(served, bases, strict=True):
                endpoint.wait_for_scrapes(base + 2)  # the phase's end's: the one before it has answered
        for step in (0, 1):
            values = bridge.collect(step)
            record = bridge.record(step)
            assert record is not None
            assert record.window_start is not None
            steps.append((values, record.time - record.window_start))
    return steps[0], steps[1]


def expected_steps(
    entries: Sequence[dict[str, Any]],
    befores: Sequence[Samples],
    afters: Sequence[Samples],
    counted: tuple[dict[str, float], float],
    held: tuple[dict[str, float], float],
    missing: int = 0,
) -> None:
    """Checks :func:`run_steps`' records: step 0's counters and histograms, step 1's gauges."""
    gauges = [e for e in entries if e["type"] == "gauge"]
    others = [e for e in entries if e["type"] != "gauge"]
    if others:
        check(counted[0], expected_record(others, befores, afters, counted[1]), missing)
    if gauges:
        check(held[0], expected_record(gauges, befores, afters, held[1]), missing)


def check(values: dict[str, float], expected: dict[str, float], missing: int = 0) -> None:
    assert expected, "the fixture holds none of the preset's metrics"
    for key, value in expected.items():
        assert key in values, (key, sorted(k for k in values if not k.startswith("otel_bridge")))
        assert values[key] == pytest.approx(value, rel=1e-9), key
    assert values["otel_bridge/missing_metrics"] == missing


@pytest.mark.parametrize("preset", ["sglang", "ray", "node"])
def test_preset_reports_what_the_fixture_implies(
    tmp_path: Path, endpoints: list[SwitchableEndpoint], preset: str
) -> None:
    before, after = fixture(preset)
    entries = [e for e in PRESETS[preset] if e["name"] not in RAY_GPU_ONLY]
    present = set(declared_types(after))
    for entry in entries:
        family = entry["name"].removesuffix("_total") if entry["name"] not in present else entry["name"]
        assert declared_types(after).get(family) == entry["type"], (entry["name"], "not in the fixture as its type")
    counted, held = run_steps(tmp_path, endpoints[:1], [(before, after)], {"preset": preset})
    expected_steps(entries, [parse(before)], [parse(after)], counted, held, missing=len(PRESETS[preset]) - len(entries))


@pytest.mark.parametrize("by", [[], ["Hostname"]])
def test_dcgm_preset_per_node_and_for_the_whole_run(
    tmp_path: Path, endpoints: list[SwitchableEndpoint], by: list[str]
) -> None:
    texts = [fixture("dcgm"), fixture("dcgm", host="gpu-node-1")]
    for entry in PRESETS["dcgm"]:
        assert declared_types(texts[0][1]).get(entry["name"]) == entry["type"], entry["name"]
    counted, held = run_steps(tmp_path, endpoints, texts, {"preset": "dcgm", "by": by})
    entries = [{**e, "by": by} for e in PRESETS["dcgm"]]
    expected_steps(entries, [parse(b) for b, _ in texts], [parse(a) for _, a in texts], counted, held)
    (values, _), (gauges, seconds) = counted, held
    if by:
        assert gauges["DCGM_FI_DEV_GPU_UTIL/mean/Hostname.gpu-node-1"] == pytest.approx((97 + 91 + 85 + 79) / 4)
        assert gauges["DCGM_FI_DEV_GPU_UTIL/busiest_gpu/max/Hostname.gpu-node-0"] == 97
    else:
        assert gauges["DCGM_FI_DEV_FB_USED/max"] == 61234 + 3 * 1500
        joules = 2 * sum(6432100 + 90000 * i for i in range(4)) / 1000  # the exporter counts millijoules
        assert values["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION/joules/delta"] == pytest.approx(joules, rel=1e-12)
        busy = 2 * (97 + 91 + 85 + 79) / 100  # GPU-seconds busy per second of the window, over the 8 GPUs
        assert gauges["DCGM_FI_DEV_GPU_UTIL/gpus/idle_seconds"] == pytest.approx(seconds * (8 - busy), rel=1e-9)


def test_ray_preset_names_are_ray_gauges() -> None:
    """Every ray preset name is a gauge that Ray's own source defines (the GPU ones included)."""
    reporter = pytest.importorskip("ray.dashboard.modules.reporter.reporter_agent")
    gauges = reporter.METRICS_GAUGES
    captured = declared_types(fixture("ray")[1])
    for entry in PRESETS["ray"]:
        name = entry["name"]
        assert entry["type"] == "gauge"
        assert name.removeprefix("ray_") in gauges or captured.get(name) == "gauge", name
    for name in RAY_GPU_ONLY:
        assert "GpuIndex" in gauges[name.removeprefix("ray_")].view.columns


def test_a_preset_entry_keeps_its_own_by_labels_before_the_users() -> None:
    queries = {q.key_name: q for q in resolve_metrics([MetricConfig(preset="node", by=["instance", "mode"])])}
    assert queries["node_cpu_seconds_total"].by == ("mode", "instance")
    assert queries["node_load1"].by == ("instance", "mode")


def test_deprecated_vllm_names_map_to_metrics_the_vllm_capture_has() -> None:
    """Every replacement in the deprecated-name table is in the real vLLM 0.32 capture with its type; no old name is."""
    captured = declared_types((FIXTURES / "vllm" / "metrics-after-requests.txt").read_text())
    for old, new in DEPRECATED.items():
        assert old not in captured, old
        if "ratio" in new:
            targets = [(new["ratio"]["numerator"], "counter"), (new["ratio"]["denominator"], "counter")]
        else:
            targets = [(new["name"], new["type"])]
        for name, kind in targets:
            assert captured.get(name) == kind, (old, name)


# vLLM's own deprecation notes, transcribed (the bridge's table must agree with them):
# - the released vllm 0.11.0 wheel, vllm/v1/metrics/loggers.py: "Deprecated in 0.9.2 - Renamed as
#   vllm:kv_cache_usage_perc / vllm:prefix_cache_queries / vllm:prefix_cache_hits" (hidden behind
#   --show-hidden-metrics-for-version) and "Deprecated in 0.11 - Renamed as vllm:inter_token_latency_seconds";
# - vllm-project/vllm docs/design/metrics.md (commit 0328b592), "Deprecated Metrics": vllm:time_in_queue_requests
#   duplicates vllm:request_queue_time_seconds; the prefix-cache hit-rate gauge gave way to the queries and hits
#   counters; vllm:num_requests_swapped and vllm:cpu_cache_usage_perc went with CPU swapping, without a replacement.
# prometheus_client exposes a Counter named vllm:prefix_cache_queries as vllm:prefix_cache_queries_total.
VLLM_RENAMED = {
    "vllm:gpu_cache_usage_perc": ("vllm:kv_cache_usage_perc", "gauge"),
    "vllm:gpu_prefix_cache_queries": ("vllm:prefix_cache_queries_total", "counter"),
    "vllm:gpu_prefix_cache_hits": ("vllm:prefix_cache_hits_total", "counter"),
    "vllm:time_per_output_token_seconds": ("vllm:inter_token_latency_seconds", "histogram"),
    "vllm:time_in_queue_requests": ("vllm:request_queue_time_seconds", "histogram"),
}
VLLM_REMOVED = ("vllm:num_requests_swapped", "vllm:cpu_cache_usage_perc")


def test_deprecated_vllm_names_follow_vllms_own_deprecation_notes() -> None:
    for old, (new, kind) in VLLM_RENAMED.items():
        assert (DEPRECATED[old]["name"], DEPRECATED[old]["type"]) == (new, kind), old
        if kind == "counter":  # the old counter as it was exposed, with _total
            assert DEPRECATED[f"{old}_total"]["name"] == new, old
    hit_rate = DEPRECATED["vllm:gpu_prefix_cache_hit_rate"]["ratio"]
    assert hit_rate == {"numerator": "vllm:prefix_cache_hits_total", "denominator": "vllm:prefix_cache_queries_total"}
    for name in VLLM_REMOVED:
        assert name not in DEPRECATED, f"{name} has no replacement in vLLM: it must be reported missing, not mapped"
