"""The bridge's own boundary scrapes: the window source when the bridge can reach the targets Prometheus scrapes
(``prometheus.boundary: scrape``; ``auto`` with few reachable targets, or any number read by node agents on Ray).

The bridge scrapes the targets Prometheus lists for the configured counters and histograms itself at each step
boundary (a :class:`~otel_bridge.producers.scrape.WatchedScraper`: a scrape producer, or node agents with
``scrape.readers``, fed by Prometheus' ``/api/v1/targets``, kept current by its watcher), so every count lands in the
step during which it happened; the scrapes say themselves when a target fails or is unread. Prometheus supplies the
rest in the same window: the gauges' history, raw PromQL, ``up``, and the counters that arrive by remote write (no
target serves them), read as the store allows without rules (``rest``: :mod:`.exact_increase` or :mod:`.samples`), the
larger of both lags standing.
"""

from __future__ import annotations

from collections.abc import Sequence

from otel_bridge.producers.base import metrics_of
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.promql._internal.sources.exact_increase import ExactIncreaseSource
from otel_bridge.producers.promql._internal.sources.samples import SamplesSource
from otel_bridge.producers.scrape import WatchedScraper
from otel_bridge.producers.window_source import ReadBudget, WindowReading
from otel_bridge.window import StepWindow

__all__ = ["BoundaryScrapesSource"]


class BoundaryScrapesSource:
    """Reads the ``scraped`` counting queries from the bridge's boundary scrapes, the rest of each window from the
    store (see the module docstring); owns ``scraper`` (closed with the source)."""

    def __init__(
        self,
        scraper: WatchedScraper,
        queries: Sequence[MetricQuery],
        scraped: Sequence[int],
        rest: SamplesSource | ExactIncreaseSource,
    ) -> None:
        self._scraper = scraper
        self._scraped = {queries[i].key_name for i in scraped}
        self._rest = rest

    def read(self, window: StepWindow, budget: ReadBudget) -> WindowReading:
        """The store's part of the window once its samples are stored, the scraped queries' statistics (within the
        budget: by then the boundary readings have had that long to come), then the store's answer."""
        plan = self._rest.prepare(window)
        scraped = metrics_of(self._scraper.produce(budget.timeout_millis, window=window))
        answered = self._scraped & {metric.name for metric in scraped}
        reading = self._rest.answer(plan)
        report = reading.report
        report.missing = [missing for missing in report.missing if missing.query.key_name not in answered]
        report.unread = None  # the boundary scrapes named them
        if self._rest.counting:  # remote-written counters beside the scraped ones: the larger distance
            report.lag_beside = True
        else:
            report.lag_s = None
        return WindowReading([*scraped, *reading.metrics], report)

    def on_boundary(self, t: float) -> None:
        """Ask the boundary scrapes for the targets' readings of ``t`` (never blocks)."""
        self._scraper.on_boundary(t)

    def close(self) -> None:
        """Stop the boundary scrapes and their watcher."""
        self._scraper.close()
