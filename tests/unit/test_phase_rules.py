"""The rules of phases, seen through the records a real Bridge delivers (no producers: durations only)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from otel_bridge import Bridge, InvalidPhaseError, StepOrderError
from otel_bridge.exporters.naming import OUTSIDE_PHASES_KEY, STEP_SECONDS_KEY


def bridge(tmp_path: Path, phase_repeats: str = "sum") -> Bridge:
    return Bridge.from_config(
        {
            "trackers": [{"type": "jsonl"}],
            "run": {"name": "phases", "dir": str(tmp_path)},
            "naming": {"phase_repeats": phase_repeats},
        }
    )


def phase_keys(record: dict[str, float]) -> list[str]:
    """The keys of the step's phases (not the step's own seconds and those outside every phase)."""
    return sorted(k for k in record if k.startswith("phase/") and k not in (STEP_SECONDS_KEY, OUTSIDE_PHASES_KEY))


def test_each_phase_gets_its_duration_and_a_repeated_name_is_numbered(tmp_path: Path) -> None:
    with bridge(tmp_path, phase_repeats="each") as b:
        with b.step(1):
            with b.phase("gen"):
                assert b.current_phase == "gen"
            with b.phase("update_actor"):
                pass
            with b.phase("gen"):
                pass
        record = b.collect(1)
    assert phase_keys(record) == ["phase/gen/seconds", "phase/gen_2/seconds", "phase/update_actor/seconds"]
    assert all(record[k] >= 0 for k in phase_keys(record))
    full = b.record(1)
    assert full is not None
    assert full.window_start is not None
    assert sum(record[k] for k in phase_keys(record)) <= full.time - full.window_start


def test_phases_do_not_nest_and_end_must_match(tmp_path: Path) -> None:
    with bridge(tmp_path) as b, b.step(1):
        b.begin_phase("gen")
        with pytest.raises(StepOrderError, match="do not nest"):
            b.begin_phase("reward")
        with pytest.raises(StepOrderError, match="end_phase"):
            b.end_phase("reward")
        b.end_phase("gen")
        with pytest.raises(ValueError, match="non-empty"):  # InvalidPhaseError is a ValueError too
            b.begin_phase(" ")


@pytest.mark.parametrize("name", ["", "  ", None, 3, b"gen", ("gen",)])
def test_a_phase_name_that_is_not_a_non_empty_string_is_a_typed_error(tmp_path: Path, name: object) -> None:
    with bridge(tmp_path) as b, b.step(1):
        with pytest.raises(InvalidPhaseError, match="phase needs a non-empty string"):
            b.begin_phase(name)  # type: ignore[arg-type]
        with pytest.raises(InvalidPhaseError):
            b.end_phase(name)  # type: ignore[arg-type]
        with b.phase("gen"):  # the bridge still works
            pass
    assert phase_keys(b.collect(1)) == ["phase/gen/seconds"]


def test_thousands_of_repeats_of_one_name_are_numbered_in_order_beside_names_that_look_numbered(
    tmp_path: Path,
) -> None:
    """Issue 27 finding 13: 6,000 phases of one name took 5.86 s (each numbering scanned every earlier phase); the
    numbering is now linear (bench/suite_phases.py measures it). ``gen_2`` written by the trainer keeps its key."""
    with bridge(tmp_path, phase_repeats="each") as b:
        with b.step(1):
            with b.phase("gen_2"):
                pass
            for _ in range(6000):
                with b.phase("gen"):
                    pass
            with b.phase("gen_2"):
                pass
        record = b.collect(1)
    expected = {"phase/gen/seconds", "phase/gen_2/seconds", "phase/gen_2_2/seconds"}
    expected |= {f"phase/gen_{n}/seconds" for n in range(3, 6002)}
    assert set(phase_keys(record)) == expected


def test_phases_between_log_calls_join_the_step_that_log_closes(tmp_path: Path) -> None:
    """verl's loop: phases, then ``log(metrics, step)`` at the end of the step."""
    with bridge(tmp_path) as b:
        b.log({"x": 0.0}, step=0)
        for step in (1, 2):
            with b.phase("gen"):
                pass
            with b.phase("update_actor"):
                pass
            b.log({"x": float(step)}, step=step)
        records = {step: b.collect(step) for step in (0, 1, 2)}
    assert phase_keys(records[0]) == []
    for step in (1, 2):
        assert phase_keys(records[step]) == ["phase/gen/seconds", "phase/update_actor/seconds"]


def test_a_phase_left_open_ends_at_the_step_boundary(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with bridge(tmp_path) as b:
        with caplog.at_level(logging.WARNING, logger="otel_bridge.pipeline.phases"), b.step(1):
            b.begin_phase("gen")
        b.end_phase("gen")  # already ended by the boundary: nothing to do
        with b.step(2):
            pass
        assert phase_keys(b.collect(1)) == ["phase/gen/seconds"]
        assert phase_keys(b.collect(2)) == []
    assert "still open at the step boundary" in caplog.text
