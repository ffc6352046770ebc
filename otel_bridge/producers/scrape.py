"""ScrapeProducer: window statistics read straight from ``/metrics`` endpoints (no Prometheus server needed).

A background sampler thread scrapes every target at each step boundary (as soon as the trainer signals it) and every
``sample_interval_s`` in between. Each scrape round is kept as a timestamped snapshot: boundary rounds are stamped with
the boundary time itself, so a window ``(start, end]`` uses the boundary snapshot at ``start`` as its baseline and the
one at ``end`` as its last sample, like Prometheus' samples. Window statistics are then computed from those samples with
the same code as the PromQL path (:mod:`otel_bridge.producers.aggregate`). Every series gets an ``instance`` label
(``host:port`` of its target), as Prometheus adds, so replicas with identical labels stay apart.

Targets answer on their own (:meth:`ScrapeProducer._scrape_round`): a round never waits for its slowest target, a
target's scrapes never overlap, and boundaries that queue while the sampler works are served together by its next
round. A window is computed once every scrape stamped at or before its end has answered or failed.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from urllib.parse import urlsplit

from opentelemetry.sdk.metrics.export import Metric

from otel_bridge.errors import ConfigError, ExpositionParseError, SampleLimitError, ScrapeError
from otel_bridge.health import BOUNDARY_LAG, MISSING_METRICS, SCRAPE_ERRORS, Health
from otel_bridge.producers.aggregate import compute_stats
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.points import missing_warning, to_metric
from otel_bridge.producers.snapshots import (
    Families,
    RawKey,
    SeriesKey,
    Snapshot,
    boundary_lag,
    prune,
    relevant,
    series,
)
from otel_bridge.prometheus.endpoint import MetricsEndpoint
from otel_bridge.prometheus.exposition import parse_exposition
from otel_bridge.ratelimit import RateLimitedLogger
from otel_bridge.suppression import suppress_in_this_thread, suppressing
from otel_bridge.window import StepWindow

_log = logging.getLogger(__name__)


def _credentials_host(url: str) -> str | None:
    """The host of ``url`` when it carries ``user:password@`` (such a target is refused), else ``None``."""
    authority = url.split("://", 1)[-1].split("/", 1)[0]
    return authority.rsplit("@", 1)[1] if "@" in authority else None


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
        self._targets_lock = threading.RLock()
        self._boundaries: queue.SimpleQueue[float | None] = queue.SimpleQueue()
        self._snapshots: list[Snapshot] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._series_keys: dict[RawKey, SeriesKey] = {}
        self._last_answer: dict[str, Snapshot] = {}
        self._waiting: dict[str, list[Snapshot]] = {}  # a target scraping now: the rounds waiting for its next scrape
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
        if first is None:
            raise ScrapeError("the scrape producer was closed before it started")
        with self._cond:
            self._cond.wait_for(lambda: not first.pending)
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
                first = self._boundaries.get(timeout=timeout)
            except queue.Empty:
                snapshot = self._scrape_round(time.time(), boundary=False)
                if snapshot is None:
                    return
                self._keep([snapshot])
                next_sample = time.monotonic() + self._sample_interval_s
                continue
            pending = self._pending([first])
            if pending is None:
                return
            snapshots = self._at_boundaries(pending)
            if snapshots is None:
                return
            self._keep(snapshots)

    def _pending(self, boundaries: list[float | None]) -> list[float] | None:
        """Every boundary queued by now (``None`` once :meth:`close` was called): the boundaries that queued while a
        round ran (steps shorter than a round, e.g. a target trickling until ``scrape.timeout_s``) are served by the
        next round together instead of one round each, a backlog that grew without bound."""
        while True:
            try:
                boundaries.append(self._boundaries.get_nowait())
            except queue.Empty:
                break
        times = [t for t in boundaries if t is not None]
        return None if len(times) < len(boundaries) else sorted(times)

    def _at_boundaries(self, boundaries: list[float]) -> list[Snapshot] | None:
        """One boundary snapshot per boundary: the first in-step sample taken after it where there is one
        (:meth:`_taken_since`), else one fresh round shared by the boundaries left. A boundary served late is read
        late, by what ``boundary_lag_s`` reports; counts are neither lost nor counted twice."""
        snapshots: list[Snapshot] = []
        fresh: Snapshot | None = None
        for t in boundaries:
            taken = self._taken_since(t)
            if taken is None:
                fresh = fresh or self._scrape_round(t, boundary=True)
                if fresh is None:
                    return None
                taken = replace(fresh, t=t)
            snapshots.append(taken)
        return snapshots

    def _keep(self, snapshots: list[Snapshot]) -> None:
        with self._cond:
            self._snapshots.extend(snapshots)
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

    def _scrape_round(self, t: float, *, boundary: bool) -> Snapshot | None:
        """Ask every target at once without waiting for their answers (``None`` once the producer is closed).

        A target still busy with an earlier round's scrape (a slow or trickling one, until ``scrape.timeout_s``) is
        asked again as soon as that scrape ends, once for all the rounds that came meanwhile: its scrapes never
        overlap, so its answers arrive in the order of the rounds' times, and the round does not wait for it, so one
        slow target never delays the healthy ones' readings.
        """
        with self._targets_lock:
            if self._closed:
                return None
            snapshot = Snapshot(t=t, boundary=boundary, families={})
            for endpoint in self._endpoints:
                instance = self._instances[endpoint.url]
                snapshot.families[instance] = None
                snapshot.pending.add(instance)
                if endpoint.url in self._waiting:
                    self._waiting[endpoint.url].append(snapshot)
                else:
                    self._start_scrape(endpoint, instance, [snapshot])
        return snapshot

    def _start_scrape(self, endpoint: MetricsEndpoint, instance: str, snapshots: list[Snapshot]) -> None:
        """Scrape ``endpoint`` once for ``snapshots``; the rounds meanwhile wait in ``_waiting`` (targets lock held;
        it is reentrant because the answer may come, and take it, before ``add_done_callback`` returns)."""
        self._waiting[endpoint.url] = []
        future = self._pool.submit(self._timed_scrape, endpoint, instance)
        future.add_done_callback(functools.partial(self._answer, endpoint, instance, snapshots))

    def _answer(
        self,
        endpoint: MetricsEndpoint,
        instance: str,
        snapshots: list[Snapshot],
        future: Future[tuple[Families | None, float]],
    ) -> None:
        if future.cancelled() or future.exception() is not None:  # the pool shut down at close()
            families, answered = None, time.time()
        else:
            families, answered = future.result()
        self._resolve(instance, snapshots, families, answered)
        with self._targets_lock:
            waiting = self._waiting.pop(endpoint.url, [])
            if waiting and not self._closed and self._instances.get(endpoint.url) == instance:
                self._start_scrape(endpoint, instance, waiting)
                return
        self._resolve(instance, waiting, None, time.time())  # closed, or the target left

    def _resolve(self, instance: str, snapshots: list[Snapshot], families: Families | None, answered: float) -> None:
        with self._cond:
            for snapshot in snapshots:
                snapshot.families[instance] = families
                snapshot.answered[instance] = answered
                snapshot.pending.discard(instance)
            self._cond.notify_all()

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
        """Wait until the boundary snapshot at ``t`` exists and every scrape stamped at or before ``t`` has answered or
        failed (a window's baseline and samples must not change under it)."""
        deadline = time.monotonic() + self._produce_timeout_s

        def ready() -> bool:
            at = any(s.boundary and s.t == t for s in self._snapshots)
            return at and not any(s.pending for s in self._snapshots if s.t <= t)

        with self._cond:
            while not ready():
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
            used = relevant(self._snapshots, self._last_answer, window)
            if window.start is not None:  # a later window may start anywhere from here on (a phase of this step)
                prune(self._snapshots, self._last_answer, window.start)
        self._health.set(BOUNDARY_LAG, boundary_lag(used, window))
        by_name = series(used, self._series_keys)
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
            latest = next((s for s in reversed(self._snapshots) if not s.pending), None)
        return sorted(i for i, f in latest.families.items() if f is None) if latest is not None else []

    def close(self) -> None:
        """Stop the sampler thread and close the HTTP sessions."""
        with self._targets_lock, self._cond:  # no round submits to the pool once it is shut down
            self._closed = True
            self._cond.notify_all()
        self._boundaries.put(None)
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for endpoint in self._endpoints:
            endpoint.close()
