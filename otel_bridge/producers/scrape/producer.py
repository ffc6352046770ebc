"""ScrapeProducer: window statistics read straight from ``/metrics`` endpoints (no Prometheus server needed).

A background sampler thread scrapes every target at each step boundary (as soon as the trainer signals it) and every
``sample_interval_s`` in between. Each scrape of a target is kept as a reading with the times its request went out and
its answer came (:mod:`otel_bridge.producers.scrape._internal.readings`), and one reading of each target stands for
each boundary: the first one sent at or after it (the exceptions for a window's start are in that module). A
window ``(start, end]`` takes its baseline from the reading standing for ``start`` and its last sample from the one
standing for ``end``, like Prometheus' samples, and computes its statistics with the same code as the PromQL path
(:mod:`otel_bridge.producers.statistics`). Every series gets an ``instance`` label (``host:port`` of its target), as
Prometheus adds, so replicas with identical labels stay apart.

Targets answer on their own: a round never waits for its slowest target, a target's scrapes never overlap, and a
boundary needs a new scrape of a target only if none was asked for since it. A window is computed once every target's
reading for its end has answered (or failed), or once the wait the caller allows is nearly over (the step's
``delivery.produce_timeout_s``, less a reserve for computing the statistics): a target whose reading has not come by
then is unread at that boundary, and the others' readings are delivered on time without it. A target unread at a
window's end is named in the record (``otel_bridge/unread_s/instance.<host:port>``, ``otel_bridge/targets_unread``)
for as long as it stays unread.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

from opentelemetry.sdk.metrics.export import ScopeMetrics

from otel_bridge.errors import ConfigError, ExpositionParseError, SampleLimitError, ScrapeError
from otel_bridge.health import SCRAPE_ERRORS, Health
from otel_bridge.http.transport import TransportOptions
from otel_bridge.producers.base import infra_scope
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.partials import WindowPartial, merge_window, window_partial
from otel_bridge.producers.scrape._internal.arguments import check_reader, target_url
from otel_bridge.producers.scrape._internal.endpoint import ENDPOINT_DEFAULTS, MetricsEndpoint
from otel_bridge.producers.scrape._internal.page_names import as_configured, page_forms
from otel_bridge.producers.scrape._internal.readings import (
    Families,
    RawKey,
    Reading,
    SeriesKey,
    Stand,
    TargetReadings,
    process_start,
    window_readings,
)
from otel_bridge.producers.statistics import ImpossibleValues
from otel_bridge.producers.window_report import WindowReporter
from otel_bridge.prometheus.exposition import parse_exposition
from otel_bridge.ratelimit import RateLimitedLogger
from otel_bridge.suppression import suppress_in_this_thread, suppressing
from otel_bridge.window import StepWindow

_log = logging.getLogger(__name__)
_STATISTICS_RESERVE_S = 2.0


def _credentials_host(url: str) -> str | None:
    """The host of ``url`` when it carries ``user:password@`` (such a target is refused), else ``None``."""
    authority = url.split("://", 1)[-1].split("/", 1)[0]
    return authority.rsplit("@", 1)[1] if "@" in authority else None


def reading_wait_s(allowed_s: float) -> float:
    """How long a window may wait for its readings when its statistics must be ready within ``allowed_s``: a quarter
    of it, at most 2 s, is kept for computing them (and, from the scrape child, for the answer's way back)."""
    return max(0.0, allowed_s - min(_STATISTICS_RESERVE_S, allowed_s / 4))


@dataclass
class _Target:
    """One scrape target: its endpoint, its readings, and whether a scrape of it is under way (``again``: another is
    wanted as soon as that one ends)."""

    endpoint: MetricsEndpoint
    readings: TargetReadings
    in_flight: bool = False
    again: bool = False

    @property
    def instance(self) -> str:
        return self.readings.instance


class ScrapeProducer:
    """Reads the configured metrics from ``/metrics`` endpoints for each step window (see the module docstring).

    ``transport`` is how every target is read (``scrape.timeout_s``, ``scrape.max_response_bytes``, ``scrape.tls``,
    ``scrape.auth``): one options object each endpoint's transport takes as it is.
    """

    def __init__(
        self,
        targets: Sequence[str],
        queries: Sequence[MetricQuery],
        *,
        transport: TransportOptions = ENDPOINT_DEFAULTS,
        sample_interval_s: float = 1.0,
        max_series: int | None = None,
        health: Health | None = None,
        produce_timeout_s: float = 30.0,
        warn_interval_s: float = 60.0,
        discovered: bool = False,
        since: Mapping[str, float] | None = None,
    ) -> None:
        check_reader(targets, queries, discovered=discovered)
        self._transport = transport
        self._discovered = discovered
        self._max_series = max_series
        self._queries = list(queries)
        self._forms = page_forms(self._wanted_names())  # a family served under another form is read too
        self._wanted = frozenset(self._forms)
        self._sample_interval_s = sample_interval_s
        self._produce_timeout_s = produce_timeout_s
        self._health = health or Health()
        self._warn = RateLimitedLogger(_log, warn_interval_s)
        self._reporter = WindowReporter(self._health, self._warn)
        self._impossible = ImpossibleValues(self._health, self._warn)
        self._pool = ThreadPoolExecutor(
            max_workers=32, thread_name_prefix="otel-bridge-scrape", initializer=suppress_in_this_thread
        )
        self._cond = threading.Condition()  # guards the targets, their readings and scrape states
        self._targets: dict[str, _Target] = {}  # by URL
        self._boundaries: queue.SimpleQueue[float | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._series_keys: dict[RawKey, SeriesKey] = {}
        self.set_targets(targets, since)

    def _wanted_names(self) -> set[str]:
        names: set[str] = set()
        for q in self._queries:
            if q.ratio is not None:
                names.update(q.ratio)
            elif q.name is not None:
                names.add(q.name)
        return names

    def set_targets(self, targets: Sequence[str], since: Mapping[str, float] | None = None) -> None:
        """Scrape these targets from the next round on (URLs or ``host:port``); called when discovery finds changes.

        ``since``: when a new target (by URL) became a target of the run, where another reader was told of it
        before this one (a node agent replacing one that died, or a target moving node): every boundary from then on
        is the target's (a window ending there waits for its reading, and names it unread until one came), and one
        before this reader's first reading of it is stood for by that reading, late by as much as ``boundary_lag_s``
        says (a node agent names the target unread in a window that began before it had the target). By
        default a new target is one from now on."""
        urls = [target_url(t) for t in targets]
        for host in filter(None, map(_credentials_host, urls)):  # never echoed: logged by host only
            self._warn.warning(
                f"credentials:{host}",
                "scrape target %s was given with credentials in its URL (user:password@...), which are refused: it "
                "is not scraped; give it without them and set scrape.auth",
                host,
            )
        urls = [url for url in dict.fromkeys(urls) if _credentials_host(url) is None]
        now = time.time()
        with self._cond:
            previous = self._targets
            self._targets = {
                url: previous.get(url)
                or _Target(
                    MetricsEndpoint(url, self._transport),
                    TargetReadings(urlsplit(url).netloc, min(now, (since or {}).get(url, now))),
                )
                for url in urls
            }
            gone = [target for url, target in previous.items() if url not in self._targets]
            instances = [target.instance for target in self._targets.values()]
            # Under the lock, as every update of a target's keys: a scrape answering or a window reporting its
            # targets meanwhile cannot bring back the key of a target that has left.
            current = set(instances)
            for target in gone:
                if target.instance not in current:
                    self._health.forget(SCRAPE_ERRORS, {"instance": target.instance})
                    self._reporter.forget(target.instance)
            for instance in instances:
                self._health.count(SCRAPE_ERRORS, 0.0, labels={"instance": instance})
            self._cond.notify_all()
        for target in gone:
            target.endpoint.close()
        _log.info("scraping %d target(s): %s", len(instances), ", ".join(instances) or "none yet")

    @property
    def targets(self) -> list[str]:
        """The target URLs read now."""
        with self._cond:
            return list(self._targets)

    @property
    def queries(self) -> list[MetricQuery]:
        """The resolved queries (types filled in after :meth:`start`)."""
        return list(self._queries)

    def start(self) -> None:
        """Scrape once to resolve metric types, then start the sampler thread.

        When none of the targets answered, a :class:`ScrapeError` says so once the sampler runs (the bridge's
        ``startup`` decides whether that stops it); discovered targets (``discovered``) may still be coming up, so
        that is logged instead. A type that cannot be resolved is a :class:`ConfigError`.
        """
        if not self._scrape_round(time.time(), every=True):
            raise ScrapeError("the scrape producer was closed before it started")
        with self._cond:
            self._cond.wait_for(lambda: self._closed or not any(t.in_flight for t in self._targets.values()))
            latest = {t.instance: t.readings.latest() for t in self._targets.values()}
        unreachable = [instance for instance, reading in latest.items() if reading is None or not reading.ok]
        if any(q.needs_kind for q in self._queries):
            answered = [r.families for r in latest.values() if r is not None and r.families is not None]
            self._queries = [self._resolve_kind(q, answered, len(answered)) for q in self._queries]
        with self._cond:  # close() may come meanwhile (a start-up in the background): it joins what it finds here
            if self._closed:
                return
            self._thread = threading.Thread(target=suppressing(self._run), name="otel-bridge-sampler", daemon=True)
            self._thread.start()
        if latest and len(unreachable) == len(latest):
            message = f"none of the {len(unreachable)} scrape target(s) answered: {', '.join(unreachable)}"
            if not self._discovered:
                raise ScrapeError(message + "; check scrape.targets, or set startup: degrade to start anyway")
            _log.warning("%s; running without their metrics until they answer", message)

    def _resolve_kind(self, query: MetricQuery, answered: Sequence[Families], reachable: int) -> MetricQuery:
        if not query.needs_kind:
            return query
        assert query.name is not None
        kinds = {fams[query.name].kind for fams in answered if query.name in fams}
        kind = next(iter(kinds)) if len(kinds) == 1 else None
        if kind not in ("counter", "gauge", "histogram"):
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
        """Ask the sampler for the targets' readings of a boundary at ``t`` (never blocks)."""
        self._boundaries.put(t)

    def _run(self) -> None:
        next_sample = time.monotonic() + self._sample_interval_s
        while True:
            timeout = max(0.0, next_sample - time.monotonic()) if self._sample_interval_s > 0 else None
            try:
                boundary = self._boundaries.get(timeout=timeout)
            except queue.Empty:
                if not self._scrape_round(time.time(), every=False):
                    return
                next_sample = time.monotonic() + self._sample_interval_s
                continue
            if boundary is None or not self._scrape_round(boundary, every=True):
                return

    def _scrape_round(self, t: float, *, every: bool) -> bool:
        """Ask the targets for a reading without waiting for their answers (``False`` once the producer is closed).

        ``every`` (a boundary at ``t``): every target that was not asked since ``t``; a target still busy with an
        earlier scrape (a slow or trickling one, until ``scrape.timeout_s``) is asked again as soon as that scrape
        ends. Otherwise (an in-step sample) the targets that are not busy. A target's scrapes never overlap, so its
        readings arrive in the order they were sent, and one slow target never delays the healthy ones' readings.
        """
        now = time.time()
        with self._cond:
            if self._closed:
                return False
            for target in self._targets.values():
                if every and target.readings.requested >= t:
                    continue
                if target.in_flight:
                    if every:
                        target.again = True
                        target.readings.requested = now
                    continue
                target.readings.requested = now
                self._start_scrape(target)
        return True

    def _start_scrape(self, target: _Target) -> None:
        """Scrape ``target`` once (the lock is held)."""
        target.in_flight = True
        future = self._pool.submit(self._timed_scrape, target)
        future.add_done_callback(functools.partial(self._answer, target))

    def _timed_scrape(self, target: _Target) -> Reading:
        """One reading of ``target``: sent when the request goes out, answered when its body has come (before it is
        parsed)."""
        sent = time.time()
        text, refused = self._fetch(target)
        answered = time.time()
        families = self._parse(target, text) if text is not None else None
        started = process_start(text) if families is not None and text else None
        return Reading(sent, answered, families, started, refused=refused)

    def _answer(self, target: _Target, future: Future[Reading]) -> None:
        if future.cancelled() or future.exception() is not None:  # the pool shut down at close()
            reading = Reading(time.time(), time.time(), None)
        else:
            reading = future.result()
        with self._cond:
            current = self._targets.get(target.endpoint.url) is target
            target.readings.add(reading)
            target.in_flight = False
            if target.again and current and not self._closed:
                target.again = False
                self._start_scrape(target)
            if not reading.ok and current:  # a target that left takes its key with it, even mid-scrape
                self._health.count(SCRAPE_ERRORS, labels={"instance": target.instance})
            self._cond.notify_all()

    def _fetch(self, target: _Target) -> tuple[str | None, bool]:
        """The target's page (``None`` when it failed), and whether its connection was refused."""
        endpoint = target.endpoint
        try:
            return endpoint.fetch(), False
        except ScrapeError as exc:
            self._warn_failed(target, str(exc))
            return None, exc.refused
        except Exception as exc:  # noqa: BLE001 - the sampler thread must outlive any one target's failure
            self._bug(target, exc)
        return None, False

    def _parse(self, target: _Target, text: str) -> Families | None:
        try:
            return as_configured(parse_exposition(text, self._wanted, max_samples=self._max_series), self._forms)
        except SampleLimitError as exc:
            self._warn_failed(
                target,
                f"scraping {target.endpoint.url}: {exc}; this scrape is dropped: narrow the metrics (labels) or raise "
                "scrape.max_series",
            )
        except ExpositionParseError as exc:
            self._warn_failed(target, str(exc))
        except Exception as exc:  # noqa: BLE001 - as in _fetch
            self._bug(target, exc)
        return None

    def _warn_failed(self, target: _Target, why: str) -> None:
        """One WARNING per target per ``warn_interval_s``, however often it fails (each failure is counted)."""
        self._warn.warning(
            f"scrape:{target.endpoint.url}",
            "%s; until it answers, every step whose end it has no reading at names it in otel_bridge/unread_s",
            why,
        )

    def _bug(self, target: _Target, exc: Exception) -> None:
        # Not a typed error: a bug below (the HTTP stack, the parser). Counted and logged with its traceback, and
        # only this target's scrape is lost; the sampler goes on for the others.
        self._warn.error(
            f"scrape-bug:{target.endpoint.url}",
            "scraping %s failed with an unexpected %s: %s (please report it)",
            target.instance,
            type(exc).__name__,
            exc,
            exc_info=True,
        )

    def _stands(self, window: StepWindow, wait_s: float) -> dict[str, tuple[Stand | None, Stand]]:
        """What stands for ``window``'s boundaries, per target: waits until every target's reading of them is decided,
        at most ``wait_s`` (a target whose reading has not come by then is unread there)."""
        deadline = time.monotonic() + wait_s
        with self._cond:
            while True:
                stands: dict[str, tuple[Stand | None, Stand]] = {}
                late: list[_Target] = []
                for target in self._targets.values():
                    readings = target.readings
                    start = readings.start_stand(window.start) if window.start is not None else None
                    end = readings.end_stand(window.end)
                    if end is None or (window.start is not None and start is None):
                        late.append(target)
                    else:
                        stands[target.instance] = (start, end)
                remaining = deadline - time.monotonic()
                if not late or remaining <= 0 or self._closed:
                    break
                self._cond.wait(remaining)
            for target in late:
                readings = target.readings
                start = None
                if window.start is not None:
                    start = readings.start_stand(window.start) or readings.decide_unread(window.start)
                stands[target.instance] = (start, readings.end_stand(window.end) or readings.decide_unread(window.end))
        if late:
            self._warn.warning(
                "late",
                "step %d: no reading of %s came within %.3gs (delivery.produce_timeout_s less the time to compute the "
                "statistics): unread in this step; the other targets' readings are delivered. A target answering "
                "within scrape.timeout_s is read within twice that after a boundary: keep delivery.produce_timeout_s "
                "above it",
                window.step,
                ", ".join(t.instance for t in late),
                wait_s,
            )
        return stands

    def produce(self, timeout_millis: float = 10_000, *, window: StepWindow) -> list[ScopeMetrics]:
        """Statistics for ``window`` from the targets' readings, within ``timeout_millis``: waits for the readings
        of its boundaries (:meth:`_stands`) up to its own ``produce_timeout_s`` and never past :func:`reading_wait_s`
        of ``timeout_millis``, so a late target is unread there and the others' statistics still come in time. They
        are this reader's :meth:`partial` merged alone, the numbers node agents' partials merge into."""
        partial = self.partial(window, timeout_millis)
        metrics, report = merge_window(self._queries, [partial], window, self._impossible)
        with self._cond:  # a target that left meanwhile (set_targets) is not named again
            current = {target.instance for target in self._targets.values()}
            report.unread = [target for target in report.unread or () if target.instance in current]
            self._reporter.publish(report)
        return infra_scope(metrics)

    def partial(self, window: StepWindow, timeout_millis: float = 10_000, reader: str = "the bridge") -> WindowPartial:
        """What these targets' readings hold of ``window``, as a mergeable :class:`WindowPartial`, waiting for its
        boundaries' readings as :meth:`produce` does; ``reader`` names who read them."""
        stands = self._stands(window, min(self._produce_timeout_s, reading_wait_s(timeout_millis / 1000)))
        with self._cond:
            targets = {t.instance: t.readings for t in self._targets.values() if t.instance in stands}
            read = window_readings(targets, stands, window, self._series_keys)
            if window.start is not None:  # a later window may start anywhere from here on (a phase of this step)
                for readings in targets.values():
                    readings.prune(window.start)
        return window_partial(
            self._queries,
            read.counting,
            read.observed,
            window,
            lag_s=read.lag_s,
            unread=read.unread,
            targets=len(targets),
            reader=reader,
            sample_gap_s=read.gap_s if self._sample_interval_s > 0 else None,
        )

    def unanswered(self) -> list[str]:
        """The targets (``host:port``) whose latest scrape failed."""
        with self._cond:
            latest = {t.instance: t.readings.latest() for t in self._targets.values()}
        return sorted(i for i, r in latest.items() if r is not None and not r.ok)

    def close(self) -> None:
        """Stop the sampler thread and close the HTTP sessions."""
        with self._cond:  # no scrape is submitted to the pool once it is shut down, and no sampler is started
            self._closed = True
            self._cond.notify_all()
            endpoints = [t.endpoint for t in self._targets.values()]
            thread = self._thread
        self._boundaries.put(None)
        if thread is not None:
            thread.join(timeout=10)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for endpoint in endpoints:
            endpoint.close()
