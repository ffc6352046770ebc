"""``otel-bridge doctor`` checks of Prometheus: it answers (and which store and version it is), how the bridge will
read a step from it, its targets are up, its scrape interval fits the steps."""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from otel_bridge.cli.doctor.context import DoctorContext, Status, listed
from otel_bridge.config import AUTO, BridgeConfig, open_regular_file
from otel_bridge.errors import ConfigError, DiscoveryError, PrometheusError, PrometheusUnreachableError
from otel_bridge.pipeline import DEFAULT_RUN_PREFIX, runs_of
from otel_bridge.producers.promql import Store, counting, cross_check_window, detect_store, find_rules
from otel_bridge.prometheus import PrometheusClient
from otel_bridge.prometheus.promql import target_duration
from otel_bridge.window import StepWindow

UNSCRAPED = "unknown"
"""A target's health before Prometheus' first scrape of it."""
STARTUP_S = 15.0
"""How long after its start a Prometheus listing no targets may still be taking them up (its first reload is at 5 s)."""
MAX_WAIT_S = 30.0
POLL_S = 0.25


def settled_targets(
    client: PrometheusClient,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[dict[str, Any]]:
    """Prometheus' active targets once it has taken them up and scraped each once, or the last answer when that takes
    longer than they should: until :data:`STARTUP_S` after its start for an empty list, then each target's scrape
    interval and timeout plus 1 s (at most :data:`MAX_WAIT_S`) for targets not scraped yet. A long-running Prometheus
    with every target scraped answers at once."""
    targets = client.targets()
    if not targets:
        age = _age_s(client)
        deadline = clock() + (min(STARTUP_S, max(0.0, STARTUP_S - age)) if age is not None else 0.0)
        while not targets and clock() < deadline:
            sleep(POLL_S)
            targets = client.targets()
    unscraped = [t for t in targets if t.get("health") == UNSCRAPED]
    deadline = clock() + first_scrape_wait_s(unscraped)
    while unscraped and clock() < deadline:
        sleep(POLL_S)
        targets = client.targets()
        unscraped = [t for t in targets if t.get("health") == UNSCRAPED]
    return targets


def first_scrape_wait_s(targets: list[dict[str, Any]]) -> float:
    """How long Prometheus may take to scrape ``targets`` a first time once listed: interval + timeout + 1 s."""
    if not targets:
        return 0.0
    longest = max(
        (target_duration(t.get("scrapeInterval")) or 15.0) + (target_duration(t.get("scrapeTimeout")) or 10.0)
        for t in targets
    )
    return min(MAX_WAIT_S, longest + 1.0)


def _age_s(client: PrometheusClient) -> float | None:
    """Seconds since Prometheus started (its ``startTime``); ``None`` when it does not say, or says a time no clock
    can hold (year 1 without a zone, before 1970 on a platform whose clock starts there)."""
    try:
        started = datetime.fromisoformat(str(client.runtimeinfo().get("startTime"))[:64]).timestamp()
    except (PrometheusError, ValueError, OverflowError, OSError):
        return None
    return time.time() - started


def _down(target: dict[str, Any]) -> str:
    error = target.get("lastError") or "no error yet"
    return f"{_short(target.get('scrapeUrl', '?'))}: {_short(target.get('health'))} ({_short(error)})"


def _short(value: object, limit: int = 200) -> str:
    """``value`` as doctor quotes a server's text: at most ``limit`` characters, the rest counted."""
    text = str(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


def check_prometheus(context: DoctorContext, config: BridgeConfig) -> PrometheusClient | None:
    """``prometheus``: the URL resolves and Prometheus answers; returns a client, or ``None``."""
    from otel_bridge.cli.discover import prometheus_url_origin
    from otel_bridge.cli.query import command_client
    from otel_bridge.discovery import resolve_prometheus_url

    if config.resolved_source() != "promql":
        context.add("prometheus", "skip", "not used: the metrics are read from the endpoints (scrape path)")
        return None
    prom = config.prometheus
    assert prom.url is not None
    try:
        if prom.url == AUTO:
            resolution = resolve_prometheus_url(AUTO, ray_port=prom.ray_port)
            url, source = resolution.url, resolution.source
        else:
            url = prom.url
            source = (
                "--prometheus-url" if context.prometheus_url else prometheus_url_origin(context.config_path) or "config"
            )
    except DiscoveryError as exc:
        context.add(
            "prometheus",
            "fail",
            f"prometheus.url: auto found nothing: {exc}",
            "set prometheus.url or OTEL_BRIDGE_PROMETHEUS_URL, or run where Ray's head runs Prometheus",
        )
        return None
    client = command_client(config, url)
    try:
        store = detect_store(client)
    except PrometheusError as exc:
        client.close()
        context.add(
            "prometheus",
            "fail",
            f"{url} (from {source}): {exc}",
            f"start Prometheus at {url} or correct prometheus.url"
            if isinstance(exc, PrometheusUnreachableError)
            else f"{url} answers, but not as Prometheus' HTTP API: set prometheus.url to Prometheus' own address (its "
            "web port, 9090 by default), not to a server it scrapes; or read the servers' /metrics directly on the "
            "scrape path (scrape.targets: otel-bridge init --scrape HOST:PORT)",
        )
        return None
    context.store = store
    context.add(
        "prometheus",
        "pass",
        f"{url} (from {source}): {store.name if store.version else f'{store.product} (version not reported)'}",
    )
    return client


def check_query_plan(context: DoctorContext, config: BridgeConfig, client: PrometheusClient, store: Store) -> None:
    """``query plan``: how the bridge will read a step's counters and histograms from this store (the plan it picks at
    start-up from what the store can do), and the store's known limits."""
    prom = config.prometheus
    counting_queries = [q for q in context.queries if counting(q)]
    if not counting_queries:
        context.add("query plan", "pass", "no counter or histogram among the metrics: gauges are read as they are")
        return
    rules_note = ""
    if prom.boundary == "samples" and prom.recording_rules != "off":
        try:
            ruleset, problems = find_rules(context.queries, client.rule_groups())
        except PrometheusError as exc:
            ruleset, problems = None, f"its rules are unknown: {exc}"
        if ruleset is not None:
            context.add(
                "query plan",
                "pass",
                f"{store.name}: each boundary is read from otel-bridge's recording rules (prometheus.recording_rules: "
                f"{prom.recording_rules}){_notes(store)}",
            )
            return
        if prom.recording_rules == "required":
            context.add(
                "query plan",
                "fail",
                f"prometheus.recording_rules: required, but {store.name} does not run them ({problems})",
                "add the file `otel-bridge prometheus-rules --config <your config>` writes to Prometheus' rule_files "
                "and reload it, or set prometheus.recording_rules: auto",
            )
            return
        rules_note = f"; otel-bridge's recording rules are not used ({problems})"
    if store.increase == "anchored":
        deltas = "one anchored increase() per window (exact: no extrapolation)"
    elif store.increase == "metricsql":
        deltas = "one increase() per window (MetricsQL's never extrapolates: exact)"
    else:
        deltas = "the samples around each boundary (no exact increase() in this store)"
    which = (
        "a step's counters and histograms"
        if prom.boundary == "samples"
        else "where Prometheus' samples bound a step (see step boundaries), its counters and histograms"
    )
    status, cross_check = _cross_check(config, client, store, context)
    context.add(
        "query plan",
        status,
        f"{store.name}: {which} are read by {deltas}; the run's last step by the samples around its end"
        f"{rules_note}{_notes(store)}{cross_check}",
        "find what in front of the store answers its increase (a gateway, a cache) and let queries through unchanged"
        if status == "warn"
        else None,
    )


def _cross_check(
    config: BridgeConfig, client: PrometheusClient, store: Store, context: DoctorContext
) -> tuple[Status, str]:
    """The store's exact increase over the last few scrape intervals against its samples around them, as a run checks
    its first windows: ``warn`` with both figures when they disagree."""
    if store.increase is None:
        return "pass", ""
    interval = context.scrape_interval_s or config.prometheus.scrape_interval_s
    end = time.time() - interval - 1.0  # every sample of the window stored
    window = StepWindow(0, end - 4 * interval, end)
    try:
        found, held = cross_check_window(client, store, context.queries, window, pad_s=2 * interval)
    except PrometheusError as exc:
        return "pass", f"; its increase could not be cross-checked against its samples: {exc}"
    if found:
        figures = "; ".join(d.describe() for d in found[:5])
        return "warn", (
            f"; its exact increase over the last {4 * interval:g}s disagrees with its own samples around that window "
            f"(a run would warn and read the samples): {figures}"
        )
    if not held:
        return "pass", f"; no counter increased over the last {4 * interval:g}s, so its increase was not cross-checked"
    return "pass", f"; its exact increase over the last {4 * interval:g}s agrees with its samples"


def _notes(store: Store) -> str:
    return "".join(f"; {note}" for note in store.notes)


def check_prometheus_targets(context: DoctorContext, client: PrometheusClient) -> None:
    """``prometheus targets``: every active scrape target is up.

    Right after Prometheus starts, its targets are not listed yet (Prometheus 2.x takes them up at the scrape
    manager's first reload, 5 s after start) or have health ``unknown`` (not scraped yet): neither says a server
    is down, so doctor waits for Prometheus' first scrape of each, for a bounded time.
    """
    try:
        targets = settled_targets(client)
    except PrometheusError as exc:
        context.add("prometheus targets", "fail", str(exc), "check Prometheus (see the prometheus check)")
        return
    if not targets:
        context.add(
            "prometheus targets",
            "fail",
            "Prometheus scrapes nothing",
            "add the rollout servers to its scrape config (otel-bridge prometheus-config writes one)",
        )
        return
    down = [t for t in targets if t.get("health") not in ("up", UNSCRAPED)]
    unscraped = [t for t in targets if t.get("health") == UNSCRAPED]
    up = len(targets) - len(down) - len(unscraped)
    problems = []
    if down:
        problems.append(f"{len(down)} down: " + listed(down, _down))
    if unscraped:
        problems.append(
            f"{len(unscraped)} not scraped yet by Prometheus after waiting {first_scrape_wait_s(unscraped):g}s (its "
            "scrape interval and timeout, plus 1s): " + listed(unscraped, lambda t: _short(t.get("scrapeUrl", "?")))
        )
    if problems:
        fixes = []
        if down:
            fixes.append("start the servers that are down, or remove them from Prometheus' scrape config")
        if unscraped:
            fixes.append("see Prometheus' log for why it does not scrape them, then run doctor again")
        context.add("prometheus targets", "fail", f"{up}/{len(targets)} up; " + "; ".join(problems), "; ".join(fixes))
    else:
        context.add("prometheus targets", "pass", f"{up}/{len(targets)} up")


def check_boundaries(context: DoctorContext, config: BridgeConfig, client: PrometheusClient) -> None:
    """``step boundaries``: Prometheus' scrape interval against the steps of the latest run in ``run.dir``."""
    try:
        targets = client.targets()
    except PrometheusError as exc:
        context.add("step boundaries", "skip", f"Prometheus' targets are unknown: {exc}")
        return
    intervals = [target_duration(t.get("scrapeInterval")) for t in targets]
    interval = max((i for i in intervals if i is not None), default=config.prometheus.scrape_interval_s)
    context.scrape_interval_s = interval
    prom = config.prometheus
    mode = {
        "samples": "Prometheus' samples (prometheus.boundary: samples)",
        "scrape": "the bridge's own boundary scrapes (prometheus.boundary: scrape)",
        "auto": f"boundary scrapes when at most {prom.boundary_max_targets} reachable targets serve the metrics (any "
        "number through node agents on a Ray cluster, scrape.readers), else Prometheus' samples (prometheus.boundary: "
        "auto)",
    }[prom.boundary]
    try:
        steps = _latest_step_seconds(runs_of(config.run))
    except ConfigError as exc:
        context.add("step boundaries", "warn", f"cannot compare step lengths: {exc}", "point run.dir at a run's files")
        return
    if steps is None:
        named = config.run.name or f"{DEFAULT_RUN_PREFIX}<time> (no run.name)"
        context.add(
            "step boundaries",
            "pass",
            f"Prometheus scrapes every {interval:g}s; boundaries observed by {mode}; no run in {config.run.dir} "
            f"named {named} (this config's runs) to compare step lengths with",
        )
        return
    run, median = steps
    finding = f"Prometheus scrapes every {interval:g}s and the steps of {run} last {median:.3g}s (median)"
    detail = f"{finding}; boundaries observed by {mode}"
    if interval <= median / 2 or prom.boundary == "scrape":
        context.add("step boundaries", "pass", detail)
        return
    context.add(
        "step boundaries",
        "warn",
        detail + f": where Prometheus' samples bound a step, its counters may be off by up to {interval:g}s of "
        "traffic (each record says by how much in otel_bridge/boundary_lag_s)",
        _boundary_fix(prom.boundary, prom.boundary_max_targets, median),
    )
    if prom.boundary == "auto":  # the step check below starts the run's producer, which tells how it observes them
        context.boundary_detail = finding


def _boundary_fix(boundary: str, max_targets: int, median_s: float) -> str:
    """What to change against long scrape intervals, from the setting in use (never the one already set)."""
    lower = f"lower Prometheus' scrape_interval below {median_s / 2:.3g}s"
    if boundary == "auto":
        return (
            f"prometheus.boundary: auto scrapes at boundaries only when at most {max_targets} targets serve the "
            "metrics and the trainer reaches them, or node agents read them on a Ray cluster (scrape.readers): make "
            f"them reachable (or raise prometheus.boundary_max_targets), set prometheus.boundary: scrape, or {lower}"
        )
    return (
        "let the bridge scrape at boundaries (prometheus.boundary: auto or scrape, targets reachable from the "
        f"trainer) or {lower}"
    )


_RUN_TAIL_BYTES = 4 << 20
"""How much of a run's ``metrics.jsonl`` doctor reads: its last 4 MiB (thousands of steps, the recent ones)."""


def _latest_step_seconds(runs: Sequence[Path]) -> tuple[Path, float] | None:
    """The newest of the config's ``runs`` (oldest first, :func:`~otel_bridge.pipeline.run_dir.runs_of`) with step
    records in ``metrics.jsonl``, and the median length of its steps' windows (``None``: no such run), from the
    file's last :data:`_RUN_TAIL_BYTES`. A ``metrics.jsonl`` that is not a regular file (a FIFO, a link to a device)
    is a :class:`ConfigError` naming it, raised before anything is read from it."""
    recorded = sorted((run / "metrics.jsonl" for run in runs if (run / "metrics.jsonl").exists()), key=_mtime)
    for path in reversed(recorded):
        with open_regular_file(path, "the run's records") as file:
            size = os.fstat(file.fileno()).st_size
            if size > _RUN_TAIL_BYTES:
                file.seek(size - _RUN_TAIL_BYTES)
                file.readline()  # the rest of a line cut by the seek
            tail = file.read(_RUN_TAIL_BYTES)
        lengths = []
        for line in tail.splitlines():
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):  # not JSON, not UTF-8, nested too deep
                continue
            if not isinstance(record, dict):
                continue
            start, end = record.get("window_start"), record.get("time")
            if isinstance(start, int | float) and isinstance(end, int | float) and end > start:
                lengths.append(end - start)
        if lengths:
            return path.parent, statistics.median(lengths)
    return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # a dangling link: the oldest, and refused when read
        return -math.inf
