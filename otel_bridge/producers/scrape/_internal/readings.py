"""Each scrape target's readings, and which of them stands for a step boundary: the scrape path's equivalent of
Prometheus' stored samples (:mod:`otel_bridge.producers.scrape.producer` takes the readings).

A :class:`Reading` is one scrape of one target: the request went out at ``sent``, the answer (or the failure) came at
``answered``, and the server rendered its page somewhere in between. A target's scrapes never overlap, so its readings
are in the order of both times.

Which reading stands for a boundary (:meth:`TargetReadings.end_stand`, :meth:`TargetReadings.start_stand`):

- **A window's end** is stood for by the first reading sent at or after it: it holds everything counted up to the end,
  and what was counted in the moments until it was rendered (``boundary_lag_s`` says how long after the end it
  answered).
- **A window's start** that is the previous window's end (contiguous steps) is stood for by that same reading, and so
  is a start that comes while the reading of the boundary before it is still being taken (``end_step(k)`` then
  ``begin_step(k + 1)`` a moment later: nothing can tell the two apart, and nothing falls between the two steps).
  Any other start, the run's opening boundary included, like an end: by the first reading sent at or after it; what
  was counted between the start and that reading lands in the window before, within ``boundary_lag_s`` (with
  ``begin_step``/``end_step`` leaving time between steps, or before the run's first step: in that time, which no step
  counts). A reading taken before a boundary never stands for it, so a window never holds what was counted before
  it began.
- **A target that joined after a boundary** (discovery found it later: :attr:`TargetReadings.added`) was not a target
  at that boundary: nothing of it stands there (:data:`ABSENT`), decided at once, so a window that ended before it
  came never waits for its reading and never names it unread; a window it joined during takes it from its first
  reading on.
- **A target whose reading failed** (down, restarting, timed out) has none: it is *unread* at that boundary. Its
  counters go on from its last successful reading, so what it counted meanwhile lands in the step where it is read
  again, or, when it came back as a new process (a new start time, or counters that fell), that step counts the new
  process from zero and what the old one counted after its last reading is lost. Every record whose end it was unread
  at names it.

Once decided, a boundary's reading is kept for every window that shares the boundary, so contiguous windows tile: the
sum of their deltas is the increase from the first boundary's reading to the last one's.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from otel_bridge.producers.statistics import RawSeries, Sample
from otel_bridge.prometheus.exposition import ExpositionFamily
from otel_bridge.window import StepWindow

Families = dict[str, ExpositionFamily]
SeriesKey = tuple[str, tuple[tuple[str, str], ...]]
RawKey = tuple[str, str, tuple[tuple[str, str], ...]]  # (instance, sample name, labels as exposed)
START_TIME = "process_start_time_seconds"
"""The gauge a target's process exposes its start with (prometheus_client and the Go client both do): a new value is a
new process, whose counters began at zero."""
_MAX_CACHED_SERIES = 200_000


@dataclass(frozen=True, slots=True)
class Reading:
    """One scrape of one target. ``families`` is ``None`` when it failed, ``refused`` when it failed because the
    connection was refused (nothing listened: no process served the port); ``started`` is the target's
    ``process_start_time_seconds`` when it exposes one, else its process' observed start
    (:meth:`TargetReadings.add`)."""

    sent: float
    answered: float
    families: Families | None
    started: float | None = None
    refused: bool = False

    @property
    def ok(self) -> bool:
        """Whether the scrape succeeded."""
        return self.families is not None


_START_TIME_LINE = re.compile(rf"^{START_TIME}(?:{{}})?[ \t]+(\S+)", re.MULTILINE)


def process_start(text: str) -> float | None:
    """The ``process_start_time_seconds`` of a ``/metrics`` page, when it has one (read apart from the configured
    metrics: it does not count against ``scrape.max_series``)."""
    match = _START_TIME_LINE.search(text)
    if match is None:
        return None
    try:
        return float(match.group(1))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Stand:
    """What stands for one boundary for one target: ``reading`` (``None``: never read successfully), and ``unread``
    when the target had no reading of its own at the boundary (``reading`` is then its last successful one)."""

    reading: Reading | None
    unread: bool


ABSENT: Final = Stand(None, unread=False)
"""What stands for a boundary that came before the target joined: nothing, and nothing is missing."""


@dataclass
class TargetReadings:
    """One target's readings in the order they were sent, and the boundaries already decided (see the module
    docstring). Not thread-safe: the producer holds its lock."""

    instance: str
    added: float
    """When the bridge began scraping it: a target never read is unread since then, and a boundary before it is not
    the target's (:data:`ABSENT`)."""
    readings: list[Reading] = field(default_factory=list)
    last_ok: Reading | None = None
    """The latest successful reading among those :meth:`prune` dropped."""
    requested: float = float("-inf")
    """When the latest scrape (answered, in flight or queued) was asked for: a boundary before it needs no new one."""
    _stands: dict[float, Stand] = field(default_factory=dict)
    _observed_start: float = -math.inf
    _refused: bool = False

    def add(self, reading: Reading) -> None:
        """Keep an answer (they arrive in the order their scrapes were sent).

        A page without ``process_start_time_seconds`` (prometheus_client in multiprocess mode: a data-parallel vLLM,
        SGLang) does not say when its process started, but its port does: a target that refused connections (nothing
        listened) and answers again is a new process, whose counters began at zero. Its readings are given the start
        the bridge observed: ``-inf`` for the process it first found (started before it looked), the first answer
        after the refusals for each later one, so :func:`~otel_bridge.producers.statistics.counter_increase` counts
        a restart whose counters passed the old values before anyone read them (they never went down). A target that
        only timed out or failed otherwise keeps its process: a slow or unreachable server still counts on.
        """
        if reading.ok and reading.started is None:
            if self._refused:
                self._observed_start = reading.sent
            reading = dataclasses.replace(reading, started=self._observed_start)
        if reading.ok:
            self._refused = False
        elif reading.refused:
            self._refused = True
        self.readings.append(reading)

    def end_stand(self, t: float) -> Stand | None:
        """What stands for ``t`` as a window's end: the first reading sent at or after it; ``None`` until it has
        answered."""
        decided = self._stands.get(t)
        if decided is not None:
            return decided
        if t < self.added:
            return ABSENT
        index = bisect.bisect_left(self.readings, t, key=lambda r: r.sent)
        if index == len(self.readings):
            return None
        return self._decide(t, index)

    def start_stand(self, t: float) -> Stand | None:
        """What stands for ``t`` as a window's start (see the module docstring); ``None`` until it can be decided."""
        decided = self._stands.get(t)
        if decided is not None:
            return decided
        if t < self.added:
            return ABSENT
        after = bisect.bisect_left(self.readings, t, key=lambda r: r.sent)
        previous = max((b for b in self._stands if b < t), default=None)
        if previous is not None:
            reading = self._stands[previous].reading
            if reading is not None and reading.answered > t and after > 0 and self.readings[after - 1] is reading:
                return self._decide(t, after - 1)  # it was still being taken at t: t cannot be told from previous
        return self.end_stand(t)

    def _decide(self, t: float, index: int) -> Stand:
        reading = self.readings[index]
        decided = Stand(reading, unread=False) if reading.ok else Stand(self._last_ok_before(index), unread=True)
        self._stands[t] = decided
        return decided

    def decide_unread(self, t: float) -> Stand:
        """Decide that nothing of this target's own stands for ``t`` (its reading did not come in time): its last
        successful reading before ``t`` carries its counters on."""
        index = bisect.bisect_left(self.readings, t, key=lambda r: r.sent)
        decided = self._stands.setdefault(t, Stand(self._last_ok_before(index), unread=True))
        return decided

    def _last_ok_before(self, index: int) -> Reading | None:
        return next((r for r in reversed(self.readings[:index]) if r.ok), self.last_ok)

    def latest(self) -> Reading | None:
        """The latest reading, successful or not."""
        return self.readings[-1] if self.readings else None

    def prune(self, start: float) -> None:
        """Forget what no window starting at or after ``start`` can use: boundaries before it, and readings before
        the one standing for it (the latest successful one among them is kept in :attr:`last_ok`)."""
        for t in [t for t in self._stands if t < start]:
            del self._stands[t]
        kept = self._stands.get(start)
        if kept is None:
            return
        reading = kept.reading
        if reading is None:  # never read: everything before start failed
            index = bisect.bisect_left(self.readings, start, key=lambda r: r.sent)
        else:  # from the reading itself on; not among them: it is last_ok, older than all of them
            index = next((i for i, r in enumerate(self.readings) if r is reading), 0)
        for reading in self.readings[:index]:
            if reading.ok:
                self.last_ok = reading
        del self.readings[:index]


@dataclass
class WindowReadings:
    """What one window reads of every target: samples by sample name, for counters (each boundary's reading at the
    boundary's time, the readings between them at their own) and for gauges (only readings taken inside the window),
    the targets unread at its end, how far its boundaries' readings were from them, and the longest time a target went
    without a gauge sample in it."""

    counting: dict[str, list[RawSeries]]
    observed: dict[str, list[RawSeries]]
    unread: dict[str, float]
    """Target (``host:port``) -> seconds from its last successful reading (when never read: from when the bridge began
    scraping it) to the window's end, for the targets unread at the end."""
    lag_s: float
    gap_s: float = 0.0
    """The longest stretch of the window, over the targets read in it, between its start, the gauge samples of a
    target (:func:`_taken_inside`) and its end: the resolution of its gauges' figures (the whole window for a target
    whose one sample is the end's reading)."""


def window_readings(
    targets: Mapping[str, TargetReadings],
    stands: Mapping[str, tuple[Stand | None, Stand]],
    window: StepWindow,
    keys: dict[RawKey, SeriesKey],
) -> WindowReadings:
    """Samples of ``window`` from each target's readings, ``stands[instance]`` being what stands for its start (or
    ``None`` without a start) and its end; ``keys`` is a cache of series keys kept between calls."""
    counting: dict[SeriesKey, tuple[list[Sample], list[float | None]]] = {}
    observed: dict[SeriesKey, tuple[list[Sample], list[float | None]]] = {}
    unread: dict[str, float] = {}
    lag = gap = 0.0
    for instance, target in targets.items():
        start_stand, end_stand = stands[instance]
        for boundary, stand in ((window.start, start_stand), (window.end, end_stand)):
            if boundary is None or stand is None or stand.unread or stand.reading is None:
                continue
            lag = max(lag, distance(stand.reading, boundary))
        if end_stand.unread:
            last = end_stand.reading
            unread[instance] = window.end - (last.sent if last is not None else target.added)
        base = start_stand.reading if start_stand is not None else None
        end = end_stand.reading
        between = _between(target.readings, base, end)
        if base is not None and window.start is not None:
            _collect(counting, instance, [(window.start, base)], keys)
        _collect(counting, instance, [(r.sent, r) for r in between], keys)
        if end is not None:  # also when it is the base: the same values at both boundaries, no increase
            _collect(counting, instance, [(window.end, end)], keys)
        taken = _taken_inside(window, start_stand, between, end_stand)
        _collect(observed, instance, taken, keys)
        if taken and not end_stand.unread:
            gap = max(gap, _longest_gap(window, [t for t, _ in taken]))
    if len(keys) > _MAX_CACHED_SERIES:  # series churn (restarts, new label values): start afresh
        keys.clear()
    return WindowReadings(_by_name(counting), _by_name(observed), unread, lag, gap)


def _longest_gap(window: StepWindow, stamps: Sequence[float]) -> float:
    """The longest stretch between the window's start, ``stamps`` (in order) and its end."""
    points = [*([window.start] if window.start is not None else []), *stamps, window.end]
    return max((b - a for a, b in itertools.pairwise(points)), default=0.0)


def _taken_inside(
    window: StepWindow, start_stand: Stand | None, between: Sequence[Reading], end_stand: Stand
) -> list[tuple[float, Reading]]:
    """A gauge's samples of ``window``: the successful readings surely rendered inside it (sent after its start,
    answered by its end), each where it was taken (its ``sent``, as Prometheus stamps a sample with its scrape's
    start).

    That is the reading standing for the start when taken after it, those taken between, and, for a target unread at
    the end, its last successful reading when taken inside. A reading standing for the start that was still under way
    at it (a start right after the previous end: nothing happens between the two) is this window's, where it had
    surely been rendered (``answered``). Not a reading answered after the end, the end's own included: it may have
    been rendered after the end, and what a trainer does to its servers right at a boundary (putting them to sleep
    for a weight sync) may be in it; the end's reading is the next window's first sample. Only a window in which no
    reading was rendered (shorter than a reading takes, or a first window before any) has the end's reading as its
    one sample, at its end: the nearest there is, ``boundary_lag_s`` after it."""

    def inside(reading: Reading) -> bool:
        return (window.start is None or reading.sent > window.start) and reading.answered <= window.end

    taken = [(r.sent, r) for r in between if inside(r)]
    base = start_stand.reading if start_stand is not None and not start_stand.unread else None
    if base is not None and window.start is not None:
        if inside(base):
            taken.insert(0, (base.sent, base))
        elif base.sent <= window.start < base.answered <= window.end:
            taken.insert(0, (base.answered, base))
    last = end_stand.reading
    if end_stand.unread:
        if last is not None and last is not base and inside(last):
            taken.append((last.sent, last))
    elif not taken and last is not None:
        taken.append((window.end, last))
    return taken


def distance(reading: Reading, t: float) -> float:
    """How far from ``t`` what ``reading`` holds may be: it was rendered somewhere between ``sent`` and ``answered``."""
    return max(reading.answered - t, t - reading.sent, 0.0)


def _between(readings: Sequence[Reading], base: Reading | None, end: Reading | None) -> list[Reading]:
    """The successful readings sent after ``base`` and before ``end`` (all of them up to ``end`` without a base)."""
    low = base.sent if base is not None else float("-inf")
    high = end.sent if end is not None else float("-inf")
    return [r for r in readings if r.ok and low < r.sent < high]


def _collect(
    into: dict[SeriesKey, tuple[list[Sample], list[float | None]]],
    instance: str,
    stamped: Iterable[tuple[float, Reading]],
    keys: dict[RawKey, SeriesKey],
) -> None:
    for t, reading in stamped:
        if reading.families is None:
            continue
        for family in reading.families.values():
            for sample in family.samples:
                raw = (instance, sample.name, tuple(sample.labels.items()))
                key = keys.get(raw)
                if key is None:
                    labels = {**sample.labels, "instance": instance}
                    key = keys[raw] = (sample.name, tuple(sorted(labels.items())))
                samples, starts = into.setdefault(key, ([], []))
                samples.append((t, sample.value))
                starts.append(reading.started)


def _by_name(series: dict[SeriesKey, tuple[list[Sample], list[float | None]]]) -> dict[str, list[RawSeries]]:
    by_name: dict[str, list[RawSeries]] = {}
    for (name, label_items), (samples, starts) in series.items():
        order = sorted(range(len(samples)), key=lambda i: samples[i][0])
        by_name.setdefault(name, []).append(
            RawSeries(
                name=name,
                labels=dict(label_items),
                samples=[samples[i] for i in order],
                starts=[starts[i] for i in order] if any(s is not None for s in starts) else None,
            )
        )
    return by_name
