"""Backfilled Prometheus history for the promql-scale suite: N vLLM replicas, without running N servers.

``generate(replicas, outdir, anchor)`` writes the history of ``replicas`` copies of the real vLLM 0.32 capture
(``tests/fixtures/vllm/metrics-after-requests.txt``; only the families of the ``vllm`` preset, found with the
project's parser) as one OpenMetrics file, turns it into TSDB blocks with ``promtool tsdb create-blocks-from
openmetrics``, deletes the text, and stores next to the blocks a ``manifest.json`` holding the window layout and the
exact truth of every window. The result is cached: a directory whose manifest has the same version is reused.

The history, per replica (``instance="127.0.x.y:8000"``, ``job="rollout"``), sampled every 15 s at a per-replica offset
(as Prometheus spreads its scrapes; never within 0.5 s of a window boundary):

- counters increase by a per-replica request rate (Poisson per interval): prompt/generation tokens per request,
  prefix-cache queries = prompt tokens and hits a per-replica fraction of them, preemptions now and then, finished
  requests split over the capture's ``finished_reason`` series; each starts at a value that is hours of such work;
- histograms observe per interval as many values as requests (time to first token, e2e latency, queue time) or
  generated tokens (inter-token latency) from a log-normal whose median drifts per interval; cumulative bucket counts,
  ``_count`` (= the ``+Inf`` bucket) and ``_sum`` (bucket midpoints) stay consistent;
- gauges (running/waiting requests, KV-cache use) vary per sample; ``vllm:engine_sleep_state`` is 1 for
  ``sleep_state="awake"`` and 0 for the other states, except for one replica (``replicas // 4``) that sleeps (weights
  offloaded, no request running) from its last sample before window ``SLEEP_WINDOW`` to that window's end: the one
  replica whose servers' idle seconds are not 0;
- ``up`` is 1 at every scrape, except for one replica (``replicas // 2``) that is down for the first two scrapes of
  window ``RESTART_WINDOW`` (``up`` 0, no other sample) and comes back with every counter and histogram reset, having
  counted only what it did since the restart.

Truth, per window ``(start, end]``, for every statistic and ``by`` group of every query the bridge resolves the preset
to (:func:`preset_queries`: a key the preset gains is in the truth, and a query the truth cannot compute raises), from
the generated values: a counter's delta is the sum over its series of the reset-aware increase from the last sample at
or before ``start`` to the last sample at or before ``end`` (an increase below the previous value counts the new value);
histogram statistics come from the summed bucket/``_sum``/``_count`` increases (quantiles with Prometheus'
``histogram_quantile`` algorithm, bounded by what ``_sum`` proves:
:func:`otel_bridge.producers.statistics.histogram_statistic`); a gauge's statistic is taken over each replica's samples
inside the window (``idle_seconds`` as docs/step-numbers.md defines it: each sample held to ``[0, busy_at]`` and
weighted by the seconds it stands for), then combined over the group's series with the query's aggregation.

``python -m bench.backfill --replicas 64 --out DIR`` generates one data set by hand.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import CAPTURE

VERSION = 4  # 2: quantiles bounded by _sum (the truth follows the statistic's definition); 3: each series once;
# 4: a sleeping replica (engine_sleep_state, idle num_requests_running), the truth of every preset query
INTERVAL_S = 15.0
WINDOW_S = 60.0
WINDOWS = 5  # measured windows 0..4; window -1 (just before) is the warm-up
RESTART_WINDOW = 2
SLEEP_WINDOW = 3
BEFORE_S = 120.0  # history before window -1 (so window -1 has a baseline sample)
AFTER_S = 60.0  # history after the last window
JOB = "rollout"

# How the preset's families are generated: the observations per interval ("requests" or "tokens") and a log-normal
# (median seconds, sigma) per histogram.
_HISTOGRAMS: dict[str, tuple[str, float, float]] = {
    "vllm:time_to_first_token_seconds": ("requests", 0.15, 0.9),
    "vllm:inter_token_latency_seconds": ("tokens", 0.025, 0.5),
    "vllm:e2e_request_latency_seconds": ("requests", 5.0, 0.8),
    "vllm:request_queue_time_seconds": ("requests", 0.02, 1.5),
}
_FINISHED = {"stop": 0.6, "length": 0.37, "abort": 0.02, "error": 0.005, "repetition": 0.005}


def preset_names(preset: str = "vllm") -> list[str]:
    """The family names (config style) the preset reads."""
    from otel_bridge.producers import PRESETS

    names: list[str] = []
    for entry in PRESETS[preset]:
        if "ratio" in entry:
            names += [entry["ratio"]["numerator"], entry["ratio"]["denominator"]]
        else:
            names.append(entry["name"])
    return names


def preset_queries(preset: str = "vllm") -> list[Any]:
    """The preset's queries as the bridge resolves them (``MetricQuery``: key names, statistics, ``by``, ``agg``)."""
    from otel_bridge.config import MetricConfig
    from otel_bridge.producers import resolve_metrics

    return list(resolve_metrics([MetricConfig(preset=preset)]))


def truth_key(name: str, stat: str | None, group: Mapping[str, str]) -> str:
    """The key of one value: ``<key name>/<stat>`` (a ratio: its key name), then its ``by`` group as sorted JSON."""
    key = f"{name}/{stat}" if stat else name
    return key + ("" if not group else json.dumps(dict(group), sort_keys=True))


@dataclass(frozen=True)
class Layout:
    """Where the windows are: window ``k`` is ``(anchor + k * window_s, anchor + (k + 1) * window_s]``."""

    anchor: float
    interval_s: float = INTERVAL_S
    window_s: float = WINDOW_S
    windows: int = WINDOWS

    def window(self, k: int) -> tuple[float, float]:
        """``(start, end)`` of window ``k`` (``-1`` is the warm-up window)."""
        return self.anchor + k * self.window_s, self.anchor + (k + 1) * self.window_s

    @property
    def first_sample(self) -> float:
        """The earliest possible sample time."""
        return self.anchor - self.window_s - BEFORE_S

    @property
    def samples(self) -> int:
        """Sample times per replica."""
        span = (self.windows + 1) * self.window_s + BEFORE_S + AFTER_S
        return int(span // self.interval_s)


def default_anchor(now: float | None = None) -> float:
    """A whole minute such that the whole history ends at least a minute before ``now``."""
    now = time.time() if now is None else now
    layout = Layout(0.0)
    span_after_anchor = layout.windows * layout.window_s + AFTER_S + 60.0
    return float(math.floor((now - span_after_anchor) / 60.0) * 60.0)


@dataclass(frozen=True)
class Series:
    """One series of the capture: sample name, its family's ``# TYPE`` name and kind, labels as text, ``le``."""

    family: str
    kind: str
    name: str
    labels: dict[str, str]


def capture_series(capture: Path = CAPTURE, preset: str = "vllm") -> list[Series]:
    """The capture's series of the preset's families, each once (a preset may name a family twice: an alias),
    parsed with otel-bridge's exposition parser."""
    from otel_bridge.prometheus import parse_exposition

    names = list(dict.fromkeys(preset_names(preset)))
    families = parse_exposition(capture.read_text(encoding="utf-8"), names)
    out = []
    for name in names:
        family = families.get(name)
        if family is None:
            raise RuntimeError(f"{capture} has no family {name}")
        type_name = name[: -len("_total")] if family.kind == "counter" and name.endswith("_total") else name
        out += [Series(type_name, family.kind, s.name, dict(s.labels)) for s in family.samples]
    return out


def _phi(x: np.ndarray) -> np.ndarray:
    """Standard normal CDF (Abramowitz-Stegun 7.1.26 erf, |error| < 1.5e-7: plenty for synthetic latencies)."""
    z = np.abs(x) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-z * z)
    return np.asarray(0.5 * (1.0 + np.sign(x) * erf))


@dataclass
class Replica:
    """One replica's samples: every scrape time, which scrapes got metrics (``present``), values per series."""

    instance: str
    times: np.ndarray
    present: np.ndarray
    values: dict[int, np.ndarray]  # index into the series list -> values at every time (ignored where not present)


def _cumulate(increments: np.ndarray, reset_at: int | None) -> np.ndarray:
    """Cumulative values from per-sample increments (axis 0), restarting from zero at ``reset_at``."""
    out = np.cumsum(increments, axis=0)
    if reset_at is not None:
        out[reset_at:] = np.cumsum(increments[reset_at:], axis=0)
    return out


def _replica(index: int, series: Sequence[Series], layout: Layout, restart: bool, sleeps: bool) -> Replica:
    rng = np.random.default_rng([20261130, index])
    k = layout.samples
    offset = round(float(rng.uniform(0.5, 14.5)), 3)
    times = np.round(layout.first_sample + offset + layout.interval_s * np.arange(k), 3)
    present = np.ones(k, dtype=bool)
    reset_at: int | None = None
    if restart:
        start, _ = layout.window(RESTART_WINDOW)
        down = int(np.searchsorted(times, start, side="right"))
        present[down : down + 2] = False
        reset_at = down + 2
    uptime_intervals = float(rng.uniform(1800.0, 7200.0)) / layout.interval_s
    rate = float(rng.uniform(2.0, 12.0))
    prompt_len = float(rng.uniform(200.0, 1500.0))
    gen_len = float(rng.uniform(100.0, 800.0))
    hit_fraction = float(rng.uniform(0.2, 0.8))
    requests = rng.poisson(rate * layout.interval_s, k).astype(np.int64)
    requests[0] = round(rate * layout.interval_s * uptime_intervals)
    prompt = rng.poisson(requests * prompt_len).astype(np.int64)
    tokens = rng.poisson(requests * gen_len).astype(np.int64)
    hits = rng.binomial(prompt, hit_fraction).astype(np.int64)
    preemptions = rng.poisson(0.3, k).astype(np.int64)
    preemptions[0] = rng.poisson(0.3 * uptime_intervals)
    reasons = list(_FINISHED)
    finished = rng.multinomial(requests, [_FINISHED[r] for r in reasons])  # (k, reasons)
    lost = ~present  # what a down replica does is never scraped
    for arr in (requests, prompt, tokens, hits, preemptions):
        arr[lost] = 0
    finished[lost] = 0
    counters = {
        "vllm:generation_tokens_total": tokens,
        "vllm:prompt_tokens_total": prompt,
        "vllm:prefix_cache_queries_total": prompt,
        "vllm:prefix_cache_hits_total": hits,
        "vllm:num_preemptions_total": preemptions,
    }
    values: dict[int, np.ndarray] = {}
    histograms: dict[str, dict[str, np.ndarray]] = {}
    running = rng.poisson(rate * 5.0, k).astype(np.float64)
    asleep = np.zeros(k, dtype=bool)
    if sleeps:  # from its last sample before window SLEEP_WINDOW to that window's end: weights offloaded, idle
        start, end = layout.window(SLEEP_WINDOW)
        asleep[
            max(int(np.searchsorted(times, start, side="right")) - 1, 0) : int(np.searchsorted(times, end, "right"))
        ] = True
        running[asleep] = 0.0
    for i, s in enumerate(series):
        if s.kind == "counter":
            if s.name == "vllm:request_success_total":
                reason = s.labels.get("finished_reason", "")
                inc = finished[:, reasons.index(reason)] if reason in reasons else np.zeros(k, dtype=np.int64)
            else:
                inc = counters.get(s.name, requests)
            values[i] = _cumulate(inc, reset_at)
        elif s.kind == "gauge":
            if s.name == "vllm:num_requests_running":
                values[i] = running
            elif s.name == "vllm:engine_sleep_state":  # 1 in the state the engine is in, 0 in the others
                state = s.labels.get("sleep_state")
                in_state = (
                    ~asleep if state == "awake" else asleep if state == "weights_offloaded" else np.zeros(k, bool)
                )
                values[i] = in_state.astype(np.float64)
            elif s.name == "vllm:num_requests_waiting":
                values[i] = rng.poisson(np.maximum(rng.normal(2.0, 3.0, k), 0.0)).astype(np.float64)
            else:  # kv_cache_usage_perc and anything else: a fraction
                values[i] = np.round(np.clip(running / (rate * 8.0) + rng.normal(0.0, 0.05, k), 0.0, 1.0), 6)
        else:
            histograms.setdefault(s.family, {})
    for family, _ in histograms.items():
        what, median, sigma = _HISTOGRAMS.get(family, ("requests", 0.1, 1.0))
        members = [(i, s) for i, s in enumerate(series) if s.family == family]
        buckets = sorted(((float(s.labels["le"]), i) for i, s in members if s.name.endswith("_bucket")))
        bounds = np.array([b for b, _ in buckets])
        observations = np.maximum(tokens - requests, 0) if what == "tokens" else requests
        medians = median * math.exp(float(rng.normal(0.0, 0.3))) * np.exp(rng.normal(0.0, 0.15, k))
        with np.errstate(divide="ignore"):
            z = (np.log(bounds)[None, :] - np.log(medians)[:, None]) / sigma
        cdf = _phi(np.where(np.isinf(bounds)[None, :], np.inf, z))
        cdf[:, np.isinf(bounds)] = 1.0
        cum = np.floor(observations[:, None] * cdf + 0.5).astype(np.int64)  # (k, buckets), last == observations
        finite = bounds[np.isfinite(bounds)]
        lower = np.concatenate([[0.0], finite])
        mids = np.concatenate([(lower[:-1] + finite) / 2.0, [finite[-1] * 1.5]])
        per_bucket = np.diff(np.concatenate([np.zeros((k, 1), dtype=np.int64), cum], axis=1), axis=1)
        sum_inc = per_bucket @ mids
        cum_values = _cumulate(cum, reset_at)
        for column, (_, i) in enumerate(buckets):
            values[i] = cum_values[:, column]
        for i, s in members:
            if s.name.endswith("_count"):
                values[i] = _cumulate(observations, reset_at)
            elif s.name.endswith("_sum"):
                values[i] = _cumulate(sum_inc, reset_at)
    instance = f"127.0.{(index + 1) >> 8}.{(index + 1) & 255}:8000"
    return Replica(instance, times, present, values)


def _label_text(labels: dict[str, str], instance: str) -> str:
    pairs = [f'{k}="{v}"' for k, v in labels.items() if k != "le"]
    pairs += [f'instance="{instance}"', f'job="{JOB}"']
    if "le" in labels:
        pairs.append(f'le="{labels["le"]}"')
    return ",".join(pairs)


def _numbers(values: np.ndarray) -> list[str]:
    if values.dtype.kind in "iu":
        return list(map(str, values.tolist()))
    return [str(int(v)) if v.is_integer() else repr(v) for v in values.tolist()]


def replicas_of(count: int, series: Sequence[Series], layout: Layout) -> list[Replica]:
    """The ``count`` replicas' histories: replica ``count // 2`` restarts in window ``RESTART_WINDOW``, replica
    ``count // 4`` sleeps from its last sample before window ``SLEEP_WINDOW`` to that window's end."""
    return [_replica(r, series, layout, r == count // 2, r == count // 4) for r in range(count)]


def write_openmetrics(path: Path, series: Sequence[Series], replicas: Sequence[Replica]) -> int:
    """Write every replica's samples as OpenMetrics (family by family, each series in time order); return bytes."""
    families: dict[str, list[int]] = {}
    for i, s in enumerate(series):
        families.setdefault(s.family, []).append(i)
    stamps = [[f"{t:.3f}" for t in r.times.tolist()] for r in replicas]
    written = 0
    with path.open("w", encoding="utf-8") as out:
        for family, members in families.items():
            kind = series[members[0]].kind
            written += out.write(f"# TYPE {family} {kind}\n")
            for r, replica in enumerate(replicas):
                ts = stamps[r]
                present = np.flatnonzero(replica.present).tolist()
                rendered = [
                    (
                        f"{series[i].name}{{{_label_text(series[i].labels, replica.instance)}}} ",
                        _numbers(replica.values[i]),
                    )
                    for i in members
                ]
                if kind == "histogram":  # one MetricPoint (buckets, count, sum) per scrape
                    lines = [f"{prefix}{vals[j]} {ts[j]}\n" for j in present for prefix, vals in rendered]
                else:
                    lines = [f"{prefix}{vals[j]} {ts[j]}\n" for prefix, vals in rendered for j in present]
                written += out.write("".join(lines))
        chunks = ["# TYPE up gauge\n"]
        for r, replica in enumerate(replicas):
            prefix = f'up{{instance="{replica.instance}",job="{JOB}"}} '
            chunks += [
                f"{prefix}{1 if p else 0} {t}\n" for p, t in zip(replica.present.tolist(), stamps[r], strict=True)
            ]
        written += out.write("".join(chunks) + "# EOF\n")
    return written


def _increase(values: np.ndarray, times: np.ndarray, start: float, end: float) -> np.ndarray:
    """Reset-aware increase per column of ``values`` (rows = present samples in time order) over ``(start, end]``."""
    base = int(np.searchsorted(times, start, side="right")) - 1
    last = int(np.searchsorted(times, end, side="right")) - 1
    if last < 0:
        return np.zeros(values.shape[1:])
    # Without a baseline (the series appeared inside the window) it counts what it did after its first sample.
    window = values[max(base, 0) : last + 1].astype(np.float64)
    previous, current = window[:-1], window[1:]
    steps = np.where(current >= previous, current - previous, current)
    return np.asarray(steps.sum(axis=0))


def _gauge_statistic(
    stat: str, times: list[float], values: list[float], start: float, end: float, scale: float | None
) -> float:
    """One series' gauge statistic over its samples inside ``(start, end]`` (docs/step-numbers.md, window statistics):
    ``idle_seconds`` is the window's seconds less each sample held to ``[0, scale]`` over ``scale``, weighted by the
    seconds it stands for (since the previous sample, the first since the window's start, the last also up to its
    end)."""
    if stat == "last":
        return values[-1]
    if stat == "max":
        return max(values)
    if stat == "min":
        return min(values)
    if stat == "mean":
        return math.fsum(values) / len(values)
    if stat == "idle_seconds" and scale is not None:
        since, until = [start, *times[:-1]], [*times[:-1], end]
        held = (min(max(v, 0.0), scale) / scale for v in values)
        return (end - start) - math.fsum(h * (b - a) for h, a, b in zip(held, since, until, strict=True))
    raise ValueError(f"the truth does not model gauge statistic {stat!r} (scale {scale}): add it to bench/backfill.py")


def _combine(agg: str, values: list[float]) -> float:
    if agg == "sum":
        return math.fsum(values)
    if agg == "mean":
        return math.fsum(values) / len(values)
    if agg == "max":
        return max(values)
    if agg == "min":
        return min(values)
    raise ValueError(f"the truth does not model aggregation {agg!r}: add it to bench/backfill.py")


def _unmodelled(query: Any) -> str | None:
    """What of ``query`` the truth does not compute (it must fail loudly rather than leave a key without truth)."""
    if query.promql is not None:
        return "a raw PromQL expression"
    if query.matchers or query.roles:
        return "matchers or roles"
    if query.ratio is None and query.kind not in ("counter", "gauge", "histogram"):
        return f"type {query.kind}"
    return None


def truth(
    series: Sequence[Series],
    replicas: Sequence[Replica],
    layout: Layout,
    preset: str = "vllm",
    counter_windows: Mapping[int, tuple[float, float]] | None = None,
) -> dict[str, Any]:
    """The exact statistics of every window ``-1 .. windows-1``: ``{"<k>": {key: value}}``, one key per statistic and
    ``by`` group of every query the bridge resolves the preset to (:func:`preset_queries`, keys :func:`truth_key`).

    ``counter_windows[k]``, when given, bounds window ``k``'s counter and histogram increases instead of the window
    itself (e.g. the recording rules' evaluations that stand for its boundaries); gauges keep the window. A query the
    truth cannot compute raises ``ValueError`` naming it.
    """
    from otel_bridge.producers import histogram_statistic

    queries = preset_queries(preset)
    for query in queries:
        reason = _unmodelled(query)
        if reason is not None:
            raise ValueError(f"the truth does not model {query.key_name} ({reason}): add it to bench/backfill.py")
    counter_ids = [i for i, s in enumerate(series) if s.kind != "gauge"]
    gauge_ids = [i for i, s in enumerate(series) if s.kind == "gauge"]
    prepared = []
    for replica in replicas:
        keep = replica.present
        matrix = np.stack([replica.values[i][keep] for i in counter_ids], axis=1)
        prepared.append((replica, replica.times[keep], matrix, {i: replica.values[i][keep] for i in gauge_ids}))

    def group_of(by: Sequence[str], i: int, replica: Replica) -> tuple[tuple[str, str], ...]:
        labels = {**series[i].labels, "instance": replica.instance, "job": JOB}
        return tuple((label, labels.get(label, "")) for label in by)

    out: dict[str, Any] = {}
    for k in range(-1, layout.windows):
        start, end = layout.window(k)
        counted_from, counted_to = (counter_windows or {}).get(k, (start, end))
        increases: dict[str, list[tuple[Replica, int, float]]] = {}  # sample name -> (replica, series, increase)
        inside: list[dict[int, tuple[list[float], list[float]]]] = []  # per replica: gauge series -> (times, values)
        for replica, times, matrix, gauges in prepared:
            counted = _increase(matrix, times, counted_from, counted_to).tolist()
            for i, inc in zip(counter_ids, counted, strict=True):
                increases.setdefault(series[i].name, []).append((replica, i, inc))
            mask = (times > start) & (times <= end)
            inside.append({i: (times[mask].tolist(), column[mask].tolist()) for i, column in gauges.items()})

        def deltas(
            sample: str, by: Sequence[str], increases: dict[str, list[tuple[Replica, int, float]]] = increases
        ) -> dict[tuple[tuple[str, str], ...], float]:
            parts: dict[tuple[tuple[str, str], ...], list[float]] = {}
            for replica, i, inc in increases.get(sample, []):
                parts.setdefault(group_of(by, i, replica), []).append(inc)
            return {group: math.fsum(v) for group, v in parts.items()}

        values: dict[str, float] = {}
        for query in queries:
            if query.ratio is not None:
                num, den = (math.fsum(deltas(name, ()).values()) for name in query.ratio)
                values[truth_key(query.key_name, None, {})] = num / den * query.scale if den > 0 else math.nan
                continue
            name = query.name
            for stat in query.stats:
                found: dict[tuple[tuple[str, str], ...], float] = {}
                if query.kind == "counter":
                    for group, delta in deltas(name, query.by).items():
                        found[group] = delta if stat == "delta" else delta / layout.window_s
                elif query.kind == "gauge":
                    per_series: dict[tuple[tuple[str, str], ...], list[float]] = {}
                    for (replica, *_), gauges in zip(prepared, inside, strict=True):
                        for i, (times, column) in gauges.items():
                            if series[i].name != name or not column:
                                continue
                            if query.full_scale is not None and not all(0.0 <= v <= query.full_scale for v in column):
                                continue  # an impossible utilization: the series is left out of the window
                            per_series.setdefault(group_of(query.by, i, replica), []).append(
                                _gauge_statistic(stat, times, column, start, end, query.idle_scale)
                            )
                    found = {group: _combine(query.agg, v) for group, v in per_series.items()}
                else:
                    counts, sums = deltas(f"{name}_count", query.by), deltas(f"{name}_sum", query.by)
                    buckets: dict[tuple[tuple[str, str], ...], dict[float, float]] = {}
                    for replica, i, inc in increases.get(f"{name}_bucket", []):
                        le = float(series[i].labels["le"])
                        group = buckets.setdefault(group_of(query.by, i, replica), {})
                        group[le] = group.get(le, 0.0) + inc
                    for group, count in counts.items():
                        statistic = histogram_statistic(stat, sorted(buckets[group].items()), sums[group], count)
                        found[group] = math.nan if statistic is None else statistic
                for group, value in found.items():
                    values[truth_key(query.key_name, stat, dict(group))] = value * query.scale
        out[str(k)] = values
    return out


@dataclass(frozen=True)
class Dataset:
    """A generated, backfilled history: its blocks, layout, truth and how long it took."""

    replicas: int
    blocks: Path
    layout: Layout
    truth: dict[str, Any]
    info: dict[str, Any]


def _load(directory: Path) -> Dataset | None:
    manifest = directory / "manifest.json"
    if not manifest.exists():
        return None
    data = json.loads(manifest.read_text())
    if data.get("version") != VERSION:
        return None
    layout = Layout(**data["layout"])
    return Dataset(data["replicas"], directory / "blocks", layout, data["truth"], {**data["info"], "cached": True})


def truth_between(dataset: Dataset, counter_windows: Mapping[int, tuple[float, float]]) -> dict[str, Any]:
    """:func:`truth` of ``dataset`` with other counter bounds, from its history generated again (deterministic)."""
    series = capture_series()
    return truth(series, replicas_of(dataset.replicas, series, dataset.layout), dataset.layout,
                 counter_windows=counter_windows)  # fmt: skip


def generate(replicas: int, outdir: Path, anchor: float | None = None, *, promtool: str = "promtool") -> Dataset:
    """The backfilled history of ``replicas`` replicas in ``outdir`` (reused when already there; see the module doc)."""
    cached = _load(outdir)
    if cached is not None and cached.replicas == replicas:
        return cached
    if outdir.exists():
        shutil.rmtree(outdir)
    outdir.mkdir(parents=True)
    layout = Layout(default_anchor() if anchor is None else anchor)
    t0 = time.perf_counter()
    series = capture_series()
    restart = replicas // 2
    data = replicas_of(replicas, series, layout)
    t1 = time.perf_counter()
    text = outdir / "history.om.txt"
    size = write_openmetrics(text, series, data)
    t2 = time.perf_counter()
    blocks = outdir / "blocks"
    done = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(text), str(blocks)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"promtool failed ({done.returncode}): {(done.stderr or done.stdout)[-2000:]}")
    t3 = time.perf_counter()
    text.unlink()
    exact = truth(series, data, layout)
    t4 = time.perf_counter()
    lines = sum(int(r.present.sum()) for r in data) * len(series) + len(data) * layout.samples
    info = {
        "series_per_replica": len(series) + 1,
        "series_total": replicas * (len(series) + 1),
        "samples_per_series": layout.samples,
        "samples_total": lines,
        "openmetrics_bytes": size,
        "block_bytes": sum(p.stat().st_size for p in blocks.rglob("*") if p.is_file()),
        "blocks": sorted(p.name for p in blocks.iterdir()),
        "restart_replica": data[restart].instance,
        "restart_down_times": data[restart].times[~data[restart].present].tolist(),
        "seconds": {"generate": t1 - t0, "write_openmetrics": t2 - t1, "promtool": t3 - t2, "truth": t4 - t3},
        "cached": False,
    }
    manifest = {
        "version": VERSION,
        "replicas": replicas,
        "layout": {"anchor": layout.anchor, "interval_s": layout.interval_s, "window_s": layout.window_s,
                   "windows": layout.windows},
        "truth": exact,
        "info": info,
    }  # fmt: skip
    (outdir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return Dataset(replicas, blocks, layout, exact, info)


def main() -> None:
    """Entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m bench.backfill", description=__doc__)
    parser.add_argument("--replicas", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    dataset = generate(args.replicas, args.out)
    print(json.dumps({"blocks": str(dataset.blocks), "info": dataset.info}, indent=1))


if __name__ == "__main__":
    main()
