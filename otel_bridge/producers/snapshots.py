"""Timestamped scrape snapshots and what a step window reads from them: the scrape path's equivalent of Prometheus'
stored samples (:mod:`otel_bridge.producers.scrape` takes the snapshots)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from otel_bridge.producers.aggregate import RawSeries
from otel_bridge.prometheus.exposition import ExpositionFamily
from otel_bridge.window import Sample, StepWindow

Families = dict[str, ExpositionFamily]
SeriesKey = tuple[str, tuple[tuple[str, str], ...]]
RawKey = tuple[str, str, tuple[tuple[str, str], ...]]  # (instance, sample name, labels as exposed)
_MAX_CACHED_SERIES = 200_000


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One scrape round: per target (``host:port``), the wanted families (``None`` where the scrape failed, or while
    its answer is pending), and when each answer arrived.

    Targets answer on their own: ``families``, ``answered`` and ``pending`` (the targets whose answer is still to come)
    are filled in by the pool's threads under the producer's condition, and are shared by the copies of a round that
    stand for several boundaries.
    """

    t: float
    boundary: bool
    families: dict[str, Families | None]
    answered: dict[str, float] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)


def relevant(snapshots: Sequence[Snapshot], last_answer: Mapping[str, Snapshot], window: StepWindow) -> list[Snapshot]:
    """The snapshots bounding and inside ``window``, in time order.

    The baseline is the last snapshot at or before the start; a target that did not answer it is represented by
    its latest earlier answer (``last_answer``: kept by :func:`prune`), so what it counted while unreachable lands
    in the window where it answers again instead of being lost.
    """
    snapshots = [s for s in snapshots if s.t <= window.end]
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
            if older is None and instance in last_answer:
                older = last_answer[instance]
            if older is not None:
                base.insert(0, Snapshot(t=older.t, boundary=False, families={instance: older.families[instance]}))
    return sorted(base, key=lambda s: s.t) + [s for s in snapshots if s.t > start]


def prune(snapshots: list[Snapshot], last_answer: dict[str, Snapshot], start: float) -> None:
    """Drop snapshots no later window can use: everything before the last one at or before ``start``, keeping each
    target's latest answer among them in ``last_answer``. Windows are asked for in the order of their starts (a
    step's, then its phases'), so a later one never starts before ``start``."""
    keep_from = 0
    for index, snapshot in enumerate(snapshots):
        if snapshot.t <= start:
            keep_from = index
    for snapshot in snapshots[:keep_from]:
        for instance, families in snapshot.families.items():
            if families is not None:
                last_answer[instance] = Snapshot(t=snapshot.t, boundary=False, families={instance: families})
    del snapshots[:keep_from]


def series(snapshots: Sequence[Snapshot], keys: dict[RawKey, SeriesKey]) -> dict[str, list[RawSeries]]:
    """The samples of every series in ``snapshots``, grouped by sample name (``keys``: a cache of series keys
    kept between calls)."""
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


def boundary_lag(snapshots: Sequence[Snapshot], window: StepWindow) -> float:
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
