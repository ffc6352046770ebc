"""Prometheus' targets that serve the configured counters and histograms, when their scrapes are stored, and keeping
them current."""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from otel_bridge.discovery.watcher import TargetWatcher
from otel_bridge.errors import ConfigError, PrometheusAPIError, PrometheusResponseError
from otel_bridge.producers.promql._internal.plan import TARGET_LABELS, Target
from otel_bridge.prometheus import promql
from otel_bridge.prometheus.client import PrometheusClient

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Schedule:
    """How often the targets are scraped, and how long after a scrape starts its samples are stored."""

    interval_s: float
    storing_delay_s: float
    targets_known: bool


def serving_targets(
    client: PrometheusClient, *name_sets: Sequence[str], members: Collection[Target] = ()
) -> list[list[dict[str, object]]]:
    """For each of ``name_sets``, Prometheus' active targets (``/api/v1/targets``, asked once) that have a series named
    in it, or that are among ``members`` (targets that served them before).

    A target that is down, or restarting, has no current series (Prometheus marks them stale at its first failed
    scrape) but is still an active target: with ``members`` it stays a serving target until Prometheus stops scraping
    it (its service discovery dropped it), so it is read again from its first scrape after its return.

    A compatible store without that API (Thanos, Mimir, ...: its series arrive by remote write) has no targets to
    list: then none, logged once, and the configured ``prometheus.scrape_interval_s`` stands.
    """
    serving: list[set[Target]] = []
    for names in name_sets:
        series = client.query(_group_by_target(names)).series if names else ()
        serving.append({(s.labels.get("job", ""), s.labels.get("instance", "")) for s in series} | set(members))
    if not any(serving):
        return [[] for _ in serving]
    try:
        targets = client.targets()
    except (PrometheusAPIError, PrometheusResponseError) as exc:
        _log.info(
            "%s lists no scrape targets (%s): the scrape interval is prometheus.scrape_interval_s and the bridge "
            "does not scrape boundaries itself",
            client.url,
            exc,
        )
        return [[] for _ in serving]
    return [[t for t in targets if target_key(t) in keys] for keys in serving]


def _group_by_target(names: Sequence[str]) -> str:
    return f"group by ({', '.join(TARGET_LABELS)}) ({{__name__=~{promql.regex_alternation(names, utf8=True)}}})"


def served_names(client: PrometheusClient, names: Sequence[str], targets: Sequence[dict[str, object]]) -> set[str]:
    """The names in ``names`` that have a series from one of ``targets``: a series that arrives by remote write (the
    collector's, the trainer's) comes from none, so the bridge's boundary scrapes of the targets cannot see it."""
    if not names or not targets:
        return set()
    keys = {target_key(t) for t in targets}
    expr = (
        f"group by (__name__, {', '.join(TARGET_LABELS)}) ({{__name__=~{promql.regex_alternation(names, utf8=True)}}})"
    )
    series = client.query(expr).series
    return {s.labels["__name__"] for s in series if (s.labels.get("job", ""), s.labels.get("instance", "")) in keys}


def schedule_of(targets: Sequence[dict[str, object]], default_interval_s: float) -> Schedule:
    """Interval and storing delay of ``targets``, from Prometheus' targets list.

    A scrape is stored when it ends: the delay is twice the longest recent scrape (``lastScrapeDuration``), at most
    the scrape timeout. Without targets there is nothing to wait for. VictoriaMetrics' targets list has no
    ``scrapeInterval``/``scrapeTimeout`` fields: their ``discoveredLabels`` ``__scrape_interval__`` and
    ``__scrape_timeout__`` say the same (``lib/promscrape/targetstatus.go``).
    """
    intervals = [i for i in (_duration(t, "scrapeInterval", "__scrape_interval__") for t in targets) if i is not None]
    timeouts = [t for t in (_duration(t, "scrapeTimeout", "__scrape_timeout__") for t in targets) if t is not None]
    durations = [d for d in (t.get("lastScrapeDuration") for t in targets) if isinstance(d, int | float)]
    interval = max(intervals) if intervals else default_interval_s
    timeout = max(timeouts) if timeouts else min(10.0, interval)
    delay = min(timeout, 2.0 * max(durations)) if durations else (timeout if targets else 0.0)
    return Schedule(interval, delay, bool(targets))


def _duration(target: dict[str, object], field: str, label: str) -> float | None:
    """A duration of a targets-list entry: its ``field``, else its discovered label ``label``."""
    found = promql.target_duration(target.get(field))
    discovered = target.get("discoveredLabels")
    if found is None and isinstance(discovered, dict):
        found = promql.target_duration(discovered.get(label))
    return found


def scrape_urls(values: Iterable[object], where: str) -> list[str]:
    """The targets list's ``scrapeUrl`` values, sorted and unique; a value that is no URL is a :class:`ConfigError`."""
    items = list(values)
    bad = [v for v in items if not (isinstance(v, str) and "://" in v)]
    if bad:
        raise ConfigError(f"{where}: {bad[0]!r} is not a scrape URL")
    return sorted({str(v) for v in items})


def target_key(target: dict[str, object]) -> Target:
    """``(job, instance)`` of an entry of Prometheus' targets list."""
    labels = target.get("labels")
    if not isinstance(labels, dict):
        return ("", "")
    return (str(labels.get("job", "")), str(labels.get("instance", "")))


class ServingTargets:
    """The targets serving the configured counters and histograms, kept current: the members whose unread readings
    and failed scrapes records name (down ones included until Prometheus stops scraping them).

    :meth:`urls` re-reads them (replacing :attr:`members` whole: read by the delivery worker, written by a watcher's
    thread). :meth:`watch` keeps them current every ``interval_s`` when nothing else re-reads them (the boundary
    scrapes' watcher does, through :meth:`urls`); what it starts, :meth:`close` stops.
    """

    def __init__(self, client: PrometheusClient, primary: Sequence[str], targets: Sequence[dict[str, object]]) -> None:
        self._client = client
        self._primary = list(primary)
        self.initial = list(targets)
        """The serving targets found at start-up."""
        self.members: frozenset[Target] = frozenset(target_key(t) for t in targets)
        self._watcher: TargetWatcher | None = None

    def urls(self) -> list[str]:
        """The serving targets' scrape URLs, read now (the members are updated)."""
        targets = serving_targets(self._client, self._primary, members=self.members)[0]
        self.members = frozenset(target_key(t) for t in targets)
        return sorted({str(t["scrapeUrl"]) for t in targets if t.get("scrapeUrl")})

    def initial_urls(self) -> list[str]:
        """The scrape URLs of the targets found at start-up, checked (:func:`scrape_urls`)."""
        return scrape_urls((t.get("scrapeUrl") for t in self.initial if t.get("scrapeUrl")), "Prometheus targets")

    def watch(self, interval_s: float) -> None:
        """Re-read the members every ``interval_s`` on a thread of their own (when there are any)."""
        if self._watcher is None and self.members:
            self._watcher = TargetWatcher(
                self.urls,
                lambda changed: None,
                interval_s=interval_s,
                initial=self.initial_urls(),
                name="Prometheus targets",
                normalize=scrape_urls,
            )
            self._watcher.start()

    def close(self) -> None:
        """Stop re-reading the members."""
        if self._watcher is not None:
            self._watcher.close()
