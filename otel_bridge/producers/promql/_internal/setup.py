"""What the store and the setup allow, found once at start-up (:mod:`.negotiation`) and read by every window source."""

from __future__ import annotations

from dataclasses import dataclass

from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.promql._internal.plan import primary_names
from otel_bridge.producers.promql._internal.rules import counting
from otel_bridge.producers.promql._internal.store import Store
from otel_bridge.producers.promql._internal.store_clock import StoreClock
from otel_bridge.producers.promql._internal.targets import Schedule

__all__ = ["Setup"]


@dataclass(frozen=True, slots=True)
class Setup:
    """The store, the configured queries with their types resolved, the serving targets' schedule, and the store's
    clock (the windows asked are on it)."""

    store: Store
    queries: tuple[MetricQuery, ...]
    schedule: Schedule
    clock: StoreClock

    @property
    def counting(self) -> list[int]:
        """The indices of the counter, histogram and ratio queries (the ones a window's increase is read for)."""
        return [i for i, q in enumerate(self.queries) if counting(q)]

    @property
    def primary_names(self) -> list[str]:
        """The sample names whose resets or late appearance mark a target for re-reading, of every counting query (as
        the store holds them: every form of :attr:`MetricQuery.forms`)."""
        return sorted(
            {s for i in self.counting for n in primary_names(self.queries[i]) for s in self.queries[i].stored(n)}
        )

    @property
    def pad_s(self) -> float:
        """How far before a boundary the sample standing for it may lie: two scrape intervals."""
        return 2.0 * self.schedule.interval_s
