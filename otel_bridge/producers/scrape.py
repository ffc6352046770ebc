"""ScrapeProducer: window statistics read straight from ``/metrics`` endpoints (no Prometheus server needed).

A background sampler thread scrapes every target at each step boundary (as soon as the trainer signals it) and every
``sample_interval_s`` in between. Each scrape round is kept as a timestamped snapshot: boundary rounds are stamped with
the boundary time itself, so a window ``(start, end]`` uses the boundary snapshot at ``start`` as its baseline and the
one at ``end`` as its last sample, like Prometheus' samples. Window statistics are then computed from those samples with
the same code as the PromQL path (:mod:`otel_bridge.producers.aggregate`). Every series gets an ``instance`` label
(``host:port`` of its target), as Prometheus adds, so replicas with identical labels stay apart.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from opentelemetry.sdk.metrics.export import Metric

from otel_bridge.errors import ConfigError, ExpositionParseError, SampleLimitError, ScrapeError
from otel_bridge.health import BOUNDARY_LAG, MISSING_METRICS, SCRAPE_ERRORS, Health
from otel_bridge.producers.aggregate import RawSeries, compute_stats
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.points import missing_warning, to_metric
from otel_bridge.prometheus.endpoint import MetricsEndpoint
from otel_bridge.prometheus.exposition import ExpositionFamily, parse_exposition
from otel_bridge.ratelimit import RateLimitedLogger
from otel_bridge.suppression import suppress_in_this_thread, suppressing
from otel_bridge.window import Sample, StepWindow

_log = logging.getLogger(__name__)

Families = dict[str, ExpositionFamily]
_MAX_CACHED_SERIES = 200_000
SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


def _credentials_host(url: str) -> str | None:
    """The host of ``url`` when it carries ``user:password@`` (such a target is refused), else ``None``."""
    authority = url.split("://", 1)[-1].split("/", 1)[0]
    return authority.rsplit("@", 1)[1] if "@" in authority else None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One scrape round: per target (``host:port``), the wanted families (``None`` where the scrape failed), and when
    each answer arrived (a boundary scrape stamped ``t`` reaches a busy sampler's targets later)."""

    t: float
    boundary: bool
    families: dict[str, Families | None]
    answered: dict[str, float] = field(default_factory=dict)


class ScrapeProducer:
    """Reads the configured metrics from ``/metrics`` endpoints for each step window (see the module docstring)."""

    def __init__(
        self,
        targets: Sequence[str],
        queries: Sequence[MetricQuery],
        *,
        timeout_s: float = 5.0,
        sample_interval_s: float = 1.0,
        max_response_bytes: int = 20_000_000,
        max_series: int | None = None,
        verify: bool | str = True,
        cert: tuple[str, str] | str | None = None,
        bearer_token: str | None = None,
        basic_auth: tuple[str, str] | None = None,
        health: Health | None = None,
        produce_timeout_s: float = 30.0,
        warn_interval_s: float = 60.0,
        strict: bool = True,
        discovered: bool = False,
    ) -> None:
        if not targets and not discovered:
            raise ConfigError("scrape.targets is empty: list the /metrics URLs (or host:port) of the rollout servers")
        if any(q.promql is not None for q in queries):
            raise ConfigError("promql metrics need the PromQL path: set prometheus.url")
        self._new_endpoint = functools.partial(
            MetricsEndpoint,
            timeout_s=timeout_s,
            max_response_bytes=max_response_bytes,
            verify=verify,
            cert=cert,
            bearer_token=bearer_token,
            basic_auth=basic_auth,
        )
        self._strict = strict and not discovered
        self._max_series = max_series
        self._endpoints: list[MetricsEndpoint] = []
        self._instances: dict[str, str] = {}
        self._queries = list(queries)
        self._wanted = frozenset(self._wanted_names())
        self._sample_interval_s = sample_interval_s
        self._produce_timeout_s = produce_timeout_s
        self._health = health or Health()
        self._warn = RateLimitedLogger(_log, warn_interval_s)
        self._pool = ThreadPoolExecutor(
            max_workers=32, thread_name_prefix="otel-bridge-scrape", initializer=suppress_in_this_thread
        )
        self._targets_lock = threading.Lock()
        self._boundaries: queue.SimpleQueue[float | None] = queue.SimpleQueue()
        self._snapshots: list[Snapshot] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._series_keys: dict[tuple[str, str, tuple[tuple[str, str], ...]], SeriesKey] = {}
        self._last_answer: dict[str, Snapshot] = {}
        self.set_targets(targets)

    def _wanted_names(self) -> set[str]:
        names: set[str] = set()
        for q in self._queries:
            if q.ratio is not None:
                names.update(q.ratio)
            elif q.name is not None:
                names.add(q.name)
        return names

    def set_targets(self, targets: Sequence[str]) -> None:
        """Scrape these targets from the next round on (URLs or ``host:port``); called when discovery finds changes."""
        urls = [t if "://" in t else f"http://{t}/metrics" for t in targets]
        for host in filter(None, map(_credentials_host, urls)):  # never echoed: logged by host only
            self._warn.warning(
                f"credentials:{host}",
                "scrape target %s was given with credentials in its URL (user:password@...), which are refused: it "
                "is not scraped; give it without them and set scrape.auth",
                host,
            )
        urls = [url for url in urls if _credentials_host(url) is None]
        with self._targets_lock:
            previous = list(self._instances.values())
            current: dict[str, MetricsEndpoint | None] = {e.url: e for e in self._endpoints}
            endpoints = [current.pop(url, None) or self._new_endpoint(url) for url in dict.fromkeys(urls)]
            for gone in current.values():
                if gone is not None:
                    gone.close()
            self._endpoints = endpoints
            self._instances = {e.url: urlsplit(e.url).netloc for e in endpoints}
            instances = list(self._instances.values())
        with self._cond:
            for gone_instance in set(self._last_answer) - set(instances):
                del self._last_answer[gone_instance]
        for left in set(previous) - set(instances):
            self._health.forget(SCRAPE_ERRORS, {"instance": left})
        for instance in instances:
            self._health.count(SCRAPE_ERRORS, 0.0, labels={"instance": instance})
        _log.info("scraping %d target(s): %s", len(instances), ", ".join(instances) or "none yet")

    @property
    def queries(self) -> list[MetricQuery]:
        """The resolved queries (types filled in after :meth:`start`)."""
        return list(self._queries)

    def start(self) -> None:
        """Scrape once to resolve metric types, then start the sampler thread."""
        first = self._scrape_round(time.time(), boundary=False)
        unreachable = [instance for instance, families in first.families.items() if families is None]
        if first.families and len(unreachable) == len(first.families):
            message = f"none of the {len(unreachable)} scrape target(s) answered: {', '.join(unreachable)}"
            if self._strict:
                raise ScrapeError(message + "; check scrape.targets, or set startup: degrade to start anyway")
            _log.warning("%s; running without their metrics until they answer (startup: degrade)", message)
        if any(q.needs_kind for q in self._queries):
            self._queries = [self._resolve_kind(q, first) for q in self._queries]
        with self._cond:
            self._snapshots.append(first)
        self._thread = threading.Thread(target=suppressing(self._run), name="otel-bridge-sampler", daemon=True)
        self._thread.start()

    def _resolve_kind(self, query: MetricQuery, snapshot: Snapshot) -> MetricQuery:
        if not query.needs_kind:
            return query
        assert query.name is not None
        kinds = {fams[query.name].kind for fams in snapshot.families.values() if fams and query.name in fams}
        kind = next(iter(kinds)) if len(kinds) == 1 else None
        if kind not in ("counter", "gauge", "histogram"):
            reachable = sum(1 for fams in snapshot.families.values() if fams is not None)
            found = (
                f"the endpoints report {sorted(kinds)}"
                if kinds
                else f"none of {reachable} reachable endpoints exposes it"
            )
            raise ConfigError(
                f"metrics[{query.source_index}] {query.name}: type unknown ({found}); "
                "set type: counter, gauge or histogram"
            )
        return query.with_kind(kind)

    def on_boundary(self, t: float) -> None:
        """Ask the sampler for a boundary scrape stamped ``t`` (never blocks)."""
        self._boundaries.put(t)

    def _run(self) -> None:
        next_sample = time.monotonic() + self._sample_interval_s
        while True:
            timeout = max(0.0, next_sample - time.monotonic()) if self._sample_interval_s > 0 else None
            try:
                t = self._boundaries.get(timeout=timeout)
            except queue.Empty:
                snapshot = self._scrape_round(time.time(), boundary=False)
                next_sample = time.monotonic() + self._sample_interval_s
            else:
                if t is None:
                    return
                snapshot = self._taken_since(t) or self._scrape_round(t, boundary=True)
            with self._cond:
                self._snapshots.append(snapshot)
                self._snapshots.sort(key=lambda s: s.t)
                self._cond.notify_all()

    def _taken_since(self, t: float) -> Snapshot | None:
        """The first in-step sample taken after the boundary ``t``, taken out to stand for the boundary, if the
        boundary reached the sampler after it took one (the trainer took the time, then was held up before telling
        this producer). A fresh scrape would read values newer than that sample's while stamped earlier: in time order
        the counters would seem to fall, and a fall reads as a restart that counts a counter's whole value again."""
        with self._cond:
            index = next((i for i, s in enumerate(self._snapshots) if s.t > t and not s.boundary), None)
            if index is None:
                return None
            taken = self._snapshots.pop(index)
        return replace(taken, t=t, boundary=True)

    def _scrape_round(self, t: float, *, boundary: bool) -> Snapshot:
        with self._targets_lock:
            endpoints = list(self._endpoints)
            instances = dict(self._instances)
        results = list(self._pool.map(lambda e: self._timed_scrape(e, instances[e.url]), endpoints))
        families = {instances[e.url]: r[0] for e, r in zip(endpoints, results, strict=True)}
        answered = {instances[e.url]: r[1] for e, r in zip(endpoints, results, strict=True)}
        return Snapshot(t=t, boundary=boundary, families=families, answered=answered)

    def _timed_scrape(self, endpoint: MetricsEndpoint, instance: str) -> tuple[Families | None, float]:
        families = self._scrape_one(endpoint, instance)
        return families, time.time()

    def _scrape_one(self, endpoint: MetricsEndpoint, instance: str) -> Families | None:
        try:
            families = parse_exposition(endpoint.fetch(), self._wanted, max_samples=self._max_series)
        except SampleLimitError as exc:
            self._health.count(SCRAPE_ERRORS, labels={"instance": instance})
            self._warn.warning(
                f"scrape:{endpoint.url}",
                "scraping %s: %s; this scrape is dropped: narrow the metrics (labels) or raise scrape.max_series",
                endpoint.url,
                exc,
            )
            return None
        except (ScrapeError, ExpositionParseError) as exc:
            self._health.count(SCRAPE_ERRORS, labels={"instance": instance})
            self._warn.warning(f"scrape:{endpoint.url}", "%s", exc)
            return None
        except Exception as exc:  # noqa: BLE001 - the sampler thread must outlive any one target's failure
            # Not a typed error: a bug below (the HTTP stack, the parser). Counted and logged with its traceback,
            # and only this target's scrape is lost; the sampler goes on for the others.
            self._health.count(SCRAPE_ERRORS, labels={"instance": instance})
            self._warn.error(
                f"scrape-bug:{endpoint.url}",
                "scraping %s failed with an unexpected %s: %s (please report it)",
                instance,
                type(exc).__name__,
                exc,
                exc_info=True,
            )
            return None
        # No forget() on success: a flapping endpoint would otherwise log every failed scrape.
        return families

    def _wait_for_boundary(self, t: float) -> bool:
        deadline = time.monotonic() + self._produce_timeout_s
        with self._cond:
            while not any(s.boundary and s.t == t for s in self._snapshots):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed:
                    return False
                self._cond.wait(remaining)
        return True

    def produce(self, window: StepWindow) -> list[Metric]:
        """Statistics for ``window`` from the stored snapshots (waits for the boundary scrape at ``window.end``)."""
        if not self._wait_for_boundary(window.end):
            raise ScrapeError(
                f"step {window.step}: the boundary scrape did not finish within {self._produce_timeout_s}s; "
                "check that the targets answer within scrape.timeout_s"
            )
        with self._cond:
            relevant = self._relevant(window)
            if window.start is not None:  # a later window may start anywhere from here on (a phase of this step)
                self._prune(window.start)
        self._health.set(BOUNDARY_LAG, _boundary_lag(relevant, window))
        by_name = self._series(relevant)
        metrics = []
        missing = []
        for query in self._queries:
            names = query.series_names()
            points = compute_stats(query, [s for name in names for s in by_name.get(name, ())], window)
            if points is None:
                missing.append(query)
            elif points:
                metrics.append(to_metric(query, points, window))
        self._health.set(MISSING_METRICS, float(len(missing)))
        for query in missing:
            missing_warning(self._warn, query, window, f"no target among {len(self._instances)} exposes it")
        return metrics

    def unanswered(self) -> list[str]:
        """The targets (``host:port``) whose latest scrape failed."""
        with self._cond:
            latest = self._snapshots[-1] if self._snapshots else None
        return sorted(i for i, f in latest.families.items() if f is None) if latest is not None else []

    def _relevant(self, window: StepWindow) -> list[Snapshot]:
        """The snapshots bounding and inside ``window``, in time order.

        The baseline is the last snapshot at or before the start; a target that did not answer it is represented by
        its latest earlier answer (kept when older snapshots are pruned), so what it counted while unreachable lands
        in the window where it answers again instead of being lost.
        """
        snapshots = [s for s in self._snapshots if s.t <= window.end]
        if window.start is None:
            return snapshots[-1:]
        start = window.start
        before = [s for s in snapshots if s.t <= start]
        base = before[-1:]
        if base:
            for instance, families in base[0].families.items():
                if families is not None:
                    continue
                older = next((s for s in reversed(before) if s.families.get(instance) is not None), None)
                if older is None and instance in self._last_answer:
                    older = self._last_answer[instance]
                if older is not None:
                    base.insert(0, Snapshot(t=older.t, boundary=False, families={instance: older.families[instance]}))
        return sorted(base, key=lambda s: s.t) + [s for s in snapshots if s.t > start]

    def _prune(self, start: float) -> None:
        """Drop snapshots no later window can use: everything before the last one at or before ``start``, keeping
        each target's latest answer among them. Windows are asked for in the order of their starts (a step's, then
        its phases'), so a later one never starts before ``start``."""
        keep_from = 0
        for index, snapshot in enumerate(self._snapshots):
            if snapshot.t <= start:
                keep_from = index
        for snapshot in self._snapshots[:keep_from]:
            for instance, families in snapshot.families.items():
                if families is not None:
                    self._last_answer[instance] = Snapshot(t=snapshot.t, boundary=False, families={instance: families})
        del self._snapshots[:keep_from]

    def _series(self, snapshots: Sequence[Snapshot]) -> dict[str, list[RawSeries]]:
        """The samples of every series in ``snapshots``, grouped by sample name."""
        keys = self._series_keys
        samples: dict[SeriesKey, list[Sample]] = {}
        for snapshot in snapshots:
            for instance, families in snapshot.families.items():
                if families is None:
                    continue
                for family in families.values():
                    for sample in family.samples:
                        raw = (instance, sample.name, tuple(sample.labels.items()))
                        key = keys.get(raw)
                        if key is None:
                            labels = {**sample.labels, "instance": instance}
                            key = keys[raw] = (sample.name, tuple(sorted(labels.items())))
                        samples.setdefault(key, []).append((snapshot.t, sample.value))
        if len(keys) > _MAX_CACHED_SERIES:  # series churn (restarts, new label values): start afresh
            keys.clear()
        by_name: dict[str, list[RawSeries]] = {}
        for (name, label_items), points in samples.items():
            by_name.setdefault(name, []).append(RawSeries(name=name, labels=dict(label_items), samples=points))
        return by_name

    def close(self) -> None:
        """Stop the sampler thread and close the HTTP sessions."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._boundaries.put(None)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for endpoint in self._endpoints:
            endpoint.close()


def _boundary_lag(snapshots: Sequence[Snapshot], window: StepWindow) -> float:
    """The largest distance between a boundary of ``window`` and the scrape that stands for it, over every target.

    For a target that answered the boundary scrape: how long after the boundary its answer arrived (a few ms; more
    when the sampler runs behind, e.g. on a loaded machine with short steps or phases). A target whose boundary
    scrape failed is represented by its latest earlier scrape: how long before the boundary that was.
    """
    lag = 0.0
    for boundary in (window.start, window.end):
        if boundary is None:
            continue
        at = next((s for s in snapshots if s.boundary and s.t == boundary), None)
        if at is None:
            continue
        for instance, families in at.families.items():
            if families is not None:
                lag = max(lag, at.answered.get(instance, boundary) - boundary)
                continue
            earlier = [s.t for s in snapshots if s.t <= boundary and s.families.get(instance) is not None]
            if earlier:
                lag = max(lag, boundary - max(earlier))
    return lag
