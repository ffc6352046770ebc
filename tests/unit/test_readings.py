"""Which scrape reading stands for a step boundary (otel_bridge/producers/scrape/_internal/readings.py), on hand-made
readings."""

from __future__ import annotations

import itertools
from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.scrape._internal.readings import Reading, Stand, TargetReadings, window_readings
from otel_bridge.producers.statistics import idle_seconds, window_increases
from otel_bridge.prometheus.exposition import ExpositionFamily, ExpositionSample
from otel_bridge.window import StepWindow

NAME = "vllm:generation_tokens_total"
QUERY = MetricQuery(key_name="vllm/generation_tokens_total", name=NAME, kind="counter", stats=("delta",))


def reading(
    sent: float, answered: float, value: float | None, started: float | None = None, refused: bool = False
) -> Reading:
    if value is None:
        return Reading(sent, answered, None, refused=refused)
    sample = ExpositionSample(NAME, MappingProxyType({}), value)
    return Reading(sent, answered, {NAME: ExpositionFamily(NAME, "counter", (sample,))}, started)


def target(*readings: Reading) -> TargetReadings:
    found = TargetReadings("127.0.0.1:8000", added=0.0)
    for r in readings:
        found.add(r)
    return found


def delta(readings: TargetReadings, window: StepWindow) -> float:
    start = readings.start_stand(window.start) if window.start is not None else None
    end = readings.end_stand(window.end)
    assert end is not None
    read = window_readings({readings.instance: readings}, {readings.instance: (start, end)}, window, {})
    increases = window_increases(QUERY, read.counting.get(NAME, []), window)
    assert increases is not None
    return sum(increases.values())


def test_an_end_is_read_by_the_first_reading_sent_after_it_and_waits_for_it() -> None:
    readings = target(reading(0.0, 0.1, 10.0), reading(1.9, 2.0, 20.0))
    assert readings.end_stand(2.0) is None  # nothing sent after it yet
    readings.add(reading(2.01, 2.05, 25.0))
    assert readings.end_stand(2.0) == Stand(readings.readings[2], unread=False)


def test_a_start_right_after_an_end_shares_its_reading_while_that_reading_is_being_taken() -> None:
    """end_step(k) at 2.0, begin_step(k + 1) at 2.001 while the end's reading (sent 2.0005) is under way: one reading
    stands for both, so what is counted after it is in step k + 1, and nothing falls between the steps."""
    readings = target(reading(0.0, 0.1, 10.0), reading(2.0005, 2.01, 20.0), reading(2.3, 2.31, 30.0))
    end = readings.end_stand(2.0)
    assert end is not None
    assert readings.start_stand(2.001) == end
    assert delta(readings, StepWindow(1, 2.001, 2.3)) == 10.0


def test_a_start_after_a_gap_that_held_a_reading_is_read_by_its_own() -> None:
    """The end's reading was over before the start: what was counted in between belongs to the gap, not the step."""
    readings = target(reading(1.9, 1.95, 5.0), reading(2.0005, 2.01, 20.0), reading(2.5, 2.51, 27.0))
    assert readings.end_stand(2.0) is not None
    start = readings.start_stand(2.4)
    assert start is not None
    assert start.reading is readings.readings[2]


def test_the_opening_boundary_is_read_by_the_first_reading_sent_after_it_however_near_one_before_it_was() -> None:
    """An in-step sample answered just before the run's first boundary holds less than the servers had counted at
    the boundary: standing for it, it would put what was counted before the run into the first step (traffic before
    ``begin_step(0)`` on a loaded machine, where the boundary's own scrape comes later than that sample)."""
    readings = target(reading(0.9, 0.95, 5.0))
    assert readings.start_stand(1.0) is None  # nothing sent after it yet: wait, never take the one before
    readings.add(reading(1.5, 1.6, 9.0))
    readings.add(reading(2.0, 2.01, 12.0))
    assert readings.start_stand(1.0) == Stand(readings.readings[1], unread=False)
    assert delta(readings, StepWindow(0, 1.0, 2.0)) == 3.0  # not 7.0: the 4 counted before 1.5 are not the step's


def test_a_failed_reading_leaves_the_target_unread_carried_by_its_last_success() -> None:
    readings = target(reading(0.0, 0.1, 10.0), reading(2.0, 2.0, None))
    assert readings.end_stand(2.0) == Stand(readings.readings[0], unread=True)
    never = target(reading(2.0, 2.0, None))
    assert never.end_stand(2.0) == Stand(None, unread=True)


def test_a_new_process_counts_from_zero_in_the_step_where_it_is_read_again() -> None:
    """Down from 3 s to 9 s; the new process (started at 8.5) counted 50 by its first reading, past the old 40."""
    readings = target(
        reading(0.0, 0.01, 10.0, started=-100.0),
        reading(2.0, 2.01, 40.0, started=-100.0),
        reading(4.0, 4.0, None),
        reading(6.0, 6.0, None),
        reading(10.0, 10.01, 50.0, started=8.5),
    )
    assert delta(readings, StepWindow(0, 0.0, 4.0)) == 30.0
    assert delta(readings, StepWindow(1, 4.0, 6.0)) == 0.0
    assert delta(readings, StepWindow(2, 6.0, 10.0)) == 50.0


def test_without_a_start_time_a_port_that_refused_connections_and_answers_again_is_a_new_process() -> None:
    """The same restart on a page without ``process_start_time_seconds`` (prometheus_client's multiprocess mode): the
    refusals say that nothing served the port, so the next answer is a new process; timeouts do not."""

    def down(refused: bool) -> TargetReadings:
        return target(
            reading(0.0, 0.01, 10.0),
            reading(2.0, 2.01, 40.0),
            reading(4.0, 4.0, None, refused=refused),
            reading(6.0, 6.0, None, refused=refused),
            reading(10.0, 10.01, 50.0),
            reading(12.0, 12.01, 55.0),
        )

    restarted = down(refused=True)
    assert [delta(restarted, StepWindow(k, a, b)) for k, (a, b) in enumerate([(0, 4), (4, 6), (6, 10), (10, 12)])] == [
        30.0,
        0.0,
        50.0,
        5.0,
    ]
    slow = down(refused=False)  # timed out: the same process, still counting
    assert delta(slow, StepWindow(2, 6.0, 10.0)) == 10.0


@given(
    gaps=st.lists(st.floats(0.001, 0.5), min_size=2, max_size=40),
    increments=st.lists(st.integers(0, 20), min_size=40, max_size=40),
    boundaries=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=8, unique=True),
)
def test_contiguous_windows_add_up_to_the_increase_between_their_outer_readings(
    gaps: list[float], increments: list[int], boundaries: list[float]
) -> None:
    readings = target()
    t, value = 0.0, 0.0
    for gap, increment in zip(gaps, increments, strict=False):
        value += increment
        readings.add(reading(t, t + gap / 2, value))
        t += gap
    cut = sorted(b * t * 0.9 for b in boundaries)
    total = 0.0
    for step, (start, end) in enumerate(itertools.pairwise(cut)):
        if readings.end_stand(end) is None:
            return
        total += delta(readings, StepWindow(step, start, end))
    first, last = readings.start_stand(cut[0]), readings.end_stand(cut[-1])
    assert first is not None
    assert last is not None
    assert total == value_of(last) - value_of(first)


def value_of(stand: Stand) -> float:
    assert stand.reading is not None
    assert stand.reading.families is not None
    return stand.reading.families[NAME].samples[0].value


GAUGE = "vllm:num_requests_running"


def gauge_reading(sent: float, answered: float, value: float) -> Reading:
    sample = ExpositionSample(GAUGE, MappingProxyType({}), value)
    return Reading(sent, answered, {GAUGE: ExpositionFamily(GAUGE, "gauge", (sample,))}, None)


def gauge_samples(readings: TargetReadings, window: StepWindow) -> list[tuple[float, float]]:
    start = readings.start_stand(window.start) if window.start is not None else None
    end = readings.end_stand(window.end)
    assert end is not None
    read = window_readings({readings.instance: readings}, {readings.instance: (start, end)}, window, {})
    (series,) = read.observed.get(GAUGE, [])
    return list(series.samples)


def test_a_gauge_window_holds_the_readings_taken_inside_it_not_the_one_taken_after_its_end() -> None:
    """A phase from 1.0 to 1.3 while the server runs requests; the trainer puts the server to sleep right after the
    phase (running 0), before the reading of the phase's end was taken. That reading belongs to the next window: the
    phase's gauge samples are its start's reading and the one sampled inside it, all at 2."""
    readings = target(
        gauge_reading(1.001, 1.004, 2.0),  # the phase's start
        gauge_reading(1.15, 1.16, 2.0),  # sampled inside
        gauge_reading(1.32, 1.36, 0.0),  # the end's, rendered after the sleep began
        gauge_reading(1.6, 1.61, 0.0),  # inside the sync
        gauge_reading(2.05, 2.06, 2.0),  # after the wake-up: the sync's end
    )
    phase = StepWindow(3, 1.0, 1.3)
    assert gauge_samples(readings, phase) == [(1.001, 2.0), (1.15, 2.0)]
    sync = StepWindow(3, 1.3, 2.0)
    assert gauge_samples(readings, sync) == [(1.32, 0.0), (1.6, 0.0)]
    assert idle_seconds(gauge_samples(readings, phase), phase, 1.0) == 0.0
    assert idle_seconds(gauge_samples(readings, sync), sync, 1.0) == pytest.approx(0.7)


def test_a_gauge_window_starting_while_the_previous_ends_reading_is_taken_holds_that_reading() -> None:
    """end_step(k) at 2.0, begin_step(k + 1) at 2.001 while the end's reading (sent 2.0005) is under way: it stands
    for both boundaries, nothing happens between them, and it had surely been rendered when it answered (2.01), inside
    step k + 1: it is that step's sample there, and not step k's."""
    readings = target(gauge_reading(1.5, 1.51, 1.0), gauge_reading(2.0005, 2.01, 3.0), gauge_reading(3.1, 3.11, 4.0))
    assert gauge_samples(readings, StepWindow(1, 1.0, 2.0)) == [(1.5, 1.0)]
    assert gauge_samples(readings, StepWindow(2, 2.001, 3.0)) == [(2.01, 3.0)]


def test_a_gauge_reading_that_failed_at_a_window_start_is_not_a_sample_of_it() -> None:
    readings = target(gauge_reading(0.5, 0.51, 1.0), Reading(1.01, 1.02, None, refused=True))
    readings.add(gauge_reading(1.4, 1.41, 2.0))
    readings.add(gauge_reading(2.1, 2.11, 5.0))
    assert gauge_samples(readings, StepWindow(1, 1.0, 2.0)) == [(1.4, 2.0)]


def test_a_gauge_window_in_which_no_reading_was_taken_has_the_ends_reading_at_its_end() -> None:
    """A step shorter than a reading takes (``with bridge.step(0): pass``): its start's reading was sent after its
    end, so nothing was taken inside it; the end's reading (the same one) is its one sample, the nearest there is."""
    readings = target(gauge_reading(0.5, 0.51, 1.0), gauge_reading(1.0002, 1.01, 4.0))
    assert gauge_samples(readings, StepWindow(0, 1.0, 1.0001)) == [(1.0001, 4.0)]


def test_a_gauge_reading_answered_after_the_window_ended_is_not_a_sample_of_it() -> None:
    """A reading sent at 1.25, inside a phase ending at 1.3, answered at 1.34 by a slow server (a loaded machine): it
    was rendered somewhere in between, maybe after the trainer put the server to sleep at the phase's end, so it
    cannot say the server idled inside the phase. Nor is it the next window's: it may have been rendered before that
    began. A window holds the readings surely rendered inside it."""
    readings = target(
        gauge_reading(1.001, 1.004, 2.0),  # the phase's start
        gauge_reading(1.1, 1.11, 2.0),  # sampled inside
        gauge_reading(1.25, 1.34, 0.0),  # sampled inside, rendered after the sleep began
        gauge_reading(1.34, 1.35, 0.0),  # the end's
        gauge_reading(1.6, 1.61, 0.0),  # inside the sync
        gauge_reading(2.05, 2.06, 2.0),  # after the wake-up: the sync's end
    )
    phase = StepWindow(3, 1.0, 1.3)
    assert gauge_samples(readings, phase) == [(1.001, 2.0), (1.1, 2.0)]
    assert idle_seconds(gauge_samples(readings, phase), phase, 1.0) == 0.0
    assert gauge_samples(readings, StepWindow(3, 1.3, 2.0)) == [(1.34, 0.0), (1.6, 0.0)]


def test_a_gauge_reading_of_an_unread_end_answered_after_it_is_not_a_sample_of_the_window() -> None:
    readings = target(gauge_reading(1.001, 1.004, 2.0), gauge_reading(1.25, 1.34, 0.0), Reading(1.34, 1.4, None))
    assert gauge_samples(readings, StepWindow(3, 1.0, 1.3)) == [(1.001, 2.0)]


def test_a_windows_sample_gap_is_the_longest_stretch_without_a_gauge_sample() -> None:
    """Sampled every 0.1 s but stalled from 1.3 to 2.2 (a starved sampler): the window's gauges rest on no reading in
    that stretch, and the window says so."""
    readings = target(
        gauge_reading(1.0, 1.01, 2.0),
        gauge_reading(1.1, 1.11, 2.0),
        gauge_reading(1.3, 1.31, 0.0),
        gauge_reading(2.2, 2.21, 0.0),
        gauge_reading(2.5, 2.51, 2.0),  # the end's
    )
    window = StepWindow(1, 1.05, 2.5)
    start, end = readings.start_stand(1.05), readings.end_stand(2.5)
    assert end is not None
    read = window_readings({readings.instance: readings}, {readings.instance: (start, end)}, window, {})
    assert read.gap_s == pytest.approx(0.9)
    short = StepWindow(1, 2.3, 2.4)  # no reading inside: its one sample is the end's, at its end
    start, end = readings.start_stand(2.3), readings.end_stand(2.4)
    assert end is not None
    read = window_readings({readings.instance: readings}, {readings.instance: (start, end)}, short, {})
    assert read.gap_s == pytest.approx(0.1)
