"""WatchedScraper: a scraper and the watcher that keeps its targets current, as one thing.

Targets that change during a run (discovered ones, ``scrape.targets: auto``; the targets Prometheus lists for the
PromQL wing's boundary scrapes) are re-resolved every ``refresh_interval_s`` by a
:class:`~otel_bridge.discovery.TargetWatcher` that hands each change to the scraper's ``set_targets``. Both are built
here, started by :meth:`WatchedScraper.start` and closed by :meth:`WatchedScraper.close`, by the producer that reads
through them: a watcher has no other owner.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from opentelemetry.sdk.metrics.export import ScopeMetrics

from otel_bridge.discovery import TargetWatcher
from otel_bridge.discovery.targets import normalize_targets
from otel_bridge.discovery.watcher import TargetResolver
from otel_bridge.errors import DiscoveryError
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.scrape.process import Scraper
from otel_bridge.window import StepWindow

__all__ = ["WatchedScraper"]


class WatchedScraper:
    """``scraper`` reading the targets ``resolve`` returns, kept current (see the module docstring).

    ``initial``: the targets already resolved (the watcher's first resolution comes one interval later); ``None``
    resolves them at :meth:`start`. ``normalize`` checks what ``resolve`` returns (``host:port`` by default; pass
    another to watch URLs); ``name`` names the watcher's thread and log lines.
    """

    def __init__(
        self,
        scraper: Scraper,
        resolve: TargetResolver,
        *,
        interval_s: float,
        name: str,
        initial: Sequence[str] | None = None,
        warn_interval_s: float = 60.0,
        normalize: Callable[[Iterable[object], str], list[str]] = normalize_targets,
    ) -> None:
        self.scraper = scraper
        self._resolve = resolve
        self._initial = None if initial is None else list(initial)
        self._interval_s = interval_s
        self._name = name
        self._warn_interval_s = warn_interval_s
        self._normalize = normalize
        self._watcher: TargetWatcher | None = None

    @property
    def queries(self) -> list[MetricQuery]:
        """The scraper's resolved queries (types filled in after :meth:`start`)."""
        return self.scraper.queries

    def start(self) -> None:
        """Resolve the targets (unless given), start the scraper on them, then the watcher. When the targets cannot
        be found yet, the :class:`DiscoveryError` is raised once both run (the watcher goes on looking)."""
        missing: DiscoveryError | None = None
        initial = self._initial
        if initial is None:
            try:
                initial = self._normalize(self._resolve(), "target")
            except DiscoveryError as exc:
                missing, initial = exc, []
            self.scraper.set_targets(initial)
        self._watcher = TargetWatcher(
            self._resolve,
            self.scraper.set_targets,
            interval_s=self._interval_s,
            initial=initial,
            name=self._name,
            warn_interval_s=self._warn_interval_s,
            normalize=self._normalize,
        )
        try:
            self.scraper.start()
        finally:
            self._watcher.start()
        if missing is not None:
            raise missing

    def on_boundary(self, t: float) -> None:
        """A step boundary at ``t``, for the scraper (never blocks)."""
        self.scraper.on_boundary(t)

    def produce(self, timeout_millis: float = 10_000, *, window: StepWindow) -> Sequence[ScopeMetrics]:
        """The scraper's statistics for ``window``."""
        return self.scraper.produce(timeout_millis, window=window)

    def unanswered(self) -> list[str]:
        """The targets whose latest scrape failed."""
        return self.scraper.unanswered()

    def close(self) -> None:
        """Stop the watcher, then the scraper."""
        if self._watcher is not None:
            self._watcher.close()
        self.scraper.close()
