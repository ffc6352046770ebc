"""A bridge records one training loop: a second thread's first ``log()``/``step()``/``phase()`` is refused with a
typed error (issue 27 finding 15).

Before: ``log()`` from two threads (documented as unsupported) produced 2,001 records for 2,000 steps, a duplicated
(corrupted) record. Two threads cannot share one sequence of step windows (whose boundary ends whose window?), so the
bridge refuses the second thread at its first call rather than locking around a sequence that has no meaning. A thread
that has ended hands the loop over: the next thread may carry on (a trainer restarting its loop in a new thread).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from otel_bridge import Bridge, TrainingThreadError
from tests.faults.support import base_config
from tests.helpers.backends import BackendDouble

STEPS = 1000


def two_loops(bridge: Bridge, first_steps: tuple[int, int]) -> tuple[list[BaseException], dict[str, list[int]]]:
    """Threads ``a`` and ``b`` log 1,000 steps each, interleaved (``first, first + 2, ...``), started together;
    returns the refusals and the steps each logged."""
    refused: list[BaseException] = []
    logged: dict[str, list[int]] = {"a": [], "b": []}
    both_started = threading.Barrier(2)

    def loop(name: str, first: int) -> None:
        both_started.wait()
        try:
            for step in range(first, first + 2 * STEPS, 2):
                bridge.log({f"{name}/x": float(step)}, step=step)
                logged[name].append(step)
        except TrainingThreadError as exc:
            refused.append(exc)

    threads = [threading.Thread(target=loop, args=(n, first)) for n, first in zip("ab", first_steps, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return refused, logged


def test_a_second_training_thread_is_refused_at_its_first_call_and_no_record_is_duplicated(tmp_path: Path) -> None:
    collecting = BackendDouble()
    with Bridge.from_config(base_config(tmp_path, "threads"), backends=[collecting]) as bridge:
        bridge.log({"main/x": 0.0}, step=0)  # this thread is the training thread, and stays alive
        refused, logged = two_loops(bridge, (1, 2))
    assert len(refused) == 2
    assert "thread" in str(refused[0])
    assert "Bridge" in str(refused[0])
    assert logged == {"a": [], "b": []}
    assert [r.step for r in collecting.records] == [0]


def test_two_threads_racing_for_a_new_bridge_one_wins_and_every_step_is_one_record(tmp_path: Path) -> None:
    collecting = BackendDouble()
    with Bridge.from_config(base_config(tmp_path, "race"), backends=[collecting]) as bridge:
        refused, logged = two_loops(bridge, (0, 1))
    assert len(refused) == 1
    (winner,) = (name for name in "ab" if logged[name])
    steps = [r.step for r in collecting.records]
    assert steps == logged[winner]
    assert len(steps) == STEPS
    assert all(set(r.values) == {f"{winner}/x"} | {k for k in r.values if k.startswith("otel_bridge/")}
               for r in collecting.records)  # fmt: skip


def test_a_thread_that_ended_hands_the_loop_to_the_next(tmp_path: Path) -> None:
    collecting = BackendDouble()
    with Bridge.from_config(base_config(tmp_path, "handover"), backends=[collecting]) as bridge:
        first = threading.Thread(target=lambda: bridge.log({"x": 0.0}, step=0))
        first.start()
        first.join(30)
        with bridge.step(1), bridge.phase("gen"):  # this thread carries on once the first has ended
            bridge.log({"x": 1.0}, step=1)
        errors: list[BaseException] = []

        def intruder() -> None:
            try:
                bridge.log({"x": 2.0}, step=2)
            except TrainingThreadError as exc:
                errors.append(exc)

        second = threading.Thread(target=intruder)
        second.start()
        second.join(30)
        assert len(errors) == 1
        assert bridge.collect(1)["x"] == 1.0  # collect() of a delivered step works from any thread
    assert [r.step for r in collecting.records] == [0, 1]


@pytest.mark.parametrize("call", ["begin_step", "phase", "commit"])
def test_every_training_call_is_refused_from_a_second_thread(tmp_path: Path, call: str) -> None:
    errors: list[BaseException] = []

    def intrude() -> None:
        try:
            if call == "begin_step":
                bridge.begin_step(5)
            elif call == "phase":
                bridge.begin_phase("gen")
            else:
                bridge.commit()
        except TrainingThreadError as exc:
            errors.append(exc)

    with Bridge.from_config(base_config(tmp_path, call)) as bridge:
        bridge.log({"x": 0.0}, step=0)
        thread = threading.Thread(target=intrude)
        thread.start()
        thread.join(30)
    assert len(errors) == 1
