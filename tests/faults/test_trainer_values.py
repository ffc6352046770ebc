"""What the trainer hands to ``bridge.log()`` / ``bridge.step()`` (issue 14, findings 9, 11, 12): a value that is not
one number loses that key only, a step is an integer checked at the call, and the bridge's own keys are refused."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from otel_bridge import Bridge
from otel_bridge.errors import InvalidStepError, ReservedKeyError
from tests.faults.support import base_config, count_logs
from tests.helpers.backends import BackendDouble
from tests.helpers.imported_when_used import ImportedWhenUsed
from tests.helpers.wandb_reader import read_history

torch = ImportedWhenUsed("torch")
#: A step given as a 0-d float tensor: made in the test, which imports torch (not every worker's collection).
FLOAT_TENSOR_STEP = "torch.tensor(1.5)"


class BrokenFloat:
    """An object whose ``__float__`` raises (a lazy value whose computation fails)."""

    def __float__(self) -> float:
        raise RuntimeError("the value could not be computed")


def _bad_values() -> dict[str, Any]:
    return {
        "two_elements": torch.tensor([1.0, 2.0]),
        "empty": torch.tensor([]),
        "meta": torch.empty(1, device="meta"),
        "meta_scalar": torch.empty((), device="meta"),
        "huge_int": 10**400,
        "broken_float": BrokenFloat(),
    }


def _jsonl(tmp_path: Path, name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]


def test_a_value_that_is_not_one_number_loses_its_key_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Finding 9: each bad value is skipped with one WARNING naming its key; the rest of every dict is delivered."""
    caplog.set_level(logging.WARNING, logger="otel_bridge")
    collecting = BackendDouble()
    config = base_config(tmp_path, "values", trackers=[{"type": "jsonl"}])
    with Bridge.from_config(config, backends=[collecting]) as bridge:
        for step in range(3):
            bridge.log({"actor/loss": 0.5 + step, "scalar_tensor": torch.tensor(2.0), **_bad_values()}, step=step)
        report = bridge.close()
    assert report.complete
    by_step = collecting.by_step()
    assert sorted(by_step) == [0, 1, 2]
    for step, values in by_step.items():
        assert values["actor/loss"] == 0.5 + step
        assert values["scalar_tensor"] == 2.0
        assert not set(_bad_values()) & set(values)
    assert by_step[2]["otel_bridge/skipped_values"] == 3 * len(_bad_values())
    assert [line["actor/loss"] for line in _jsonl(tmp_path, "values")] == [0.5, 1.5, 2.5]
    for key in _bad_values():  # one warning per key over three steps (rate-limited), naming it
        assert count_logs(caplog, f"trainer metric {key!r}") == 1, key


@pytest.mark.parametrize("step", [1.2, 1.0, "3", True, None, FLOAT_TENSOR_STEP])
def test_a_step_that_is_not_an_integer_is_refused_at_the_call(tmp_path: Path, step: object) -> None:
    """Finding 12: 1.2 and 1.7 both became step 1; now any non-integer step is a typed error, nothing recorded."""
    if step == FLOAT_TENSOR_STEP:
        step = torch.tensor(1.5)
    collecting = BackendDouble()
    with Bridge.from_config(base_config(tmp_path, "steps"), backends=[collecting]) as bridge:
        with pytest.raises(InvalidStepError, match=r"a step must be an integer|not a bool"):
            bridge.log({"a": 1.0}, step=step)  # type: ignore[arg-type]
        with pytest.raises(InvalidStepError), bridge.step(step):  # type: ignore[arg-type]
            pass
        bridge.log({"a": 2.0}, step=0)
        bridge.close()
    assert collecting.by_step() == {0: {**collecting.by_step()[0], "a": 2.0}}


def test_integer_steps_of_any_integer_type_are_exact_and_huge_ones_refused(tmp_path: Path) -> None:
    """Finding 12: numpy/torch integer steps are ints; a step above 2**53 (rounded by every tracker) is refused."""
    np = pytest.importorskip("numpy")
    collecting = BackendDouble()
    config = base_config(tmp_path, "big", trackers=[{"type": "jsonl"}])
    with Bridge.from_config(config, backends=[collecting]) as bridge:
        bridge.log({"a": 1.0}, step=np.int64(3))
        with bridge.step(torch.tensor(4)):
            pass
        with pytest.raises(InvalidStepError, match="2\\*\\*53"):
            bridge.log({"a": 1.0}, step=2**53 + 1)
        bridge.log({"a": 1.0}, step=2**53)
        bridge.close()
    assert [r.step for r in collecting.records] == [3, 4, 2**53]
    assert [line["step"] for line in _jsonl(tmp_path, "big")] == [3, 4, 2**53]


@pytest.mark.parametrize("key", ["otel_bridge/step", "otel_bridge/query_errors", "_otel_bridge/x", "otel_bridge"])
def test_a_trainer_key_in_the_bridges_namespace_is_refused_at_log(tmp_path: Path, key: str) -> None:
    """Finding 11: ``otel_bridge/step`` made wandb reject every record; now log() refuses it at once, and the
    record of the step is not touched by the refused call."""
    collecting = BackendDouble()
    with Bridge.from_config(base_config(tmp_path, "reserved"), backends=[collecting]) as bridge:
        bridge.log({"actor/loss": 1.0}, step=0)
        with pytest.raises(ReservedKeyError, match=r"rename it, e\.g\. 'trainer/otel_bridge"):
            bridge.log({"actor/loss": 9.0, key: 5.0}, step=0)
        bridge.log({"actor/loss": 2.0}, step=1)
        bridge.close()
    assert {step: values["actor/loss"] for step, values in collecting.by_step().items()} == {0: 1.0, 1: 2.0}


@pytest.mark.integration
def test_wandb_gets_every_record_when_the_trainer_tried_a_reserved_key(tmp_path: Path) -> None:
    """Finding 11 against a real (offline) wandb run: no record is rejected because of the trainer's keys."""
    pytest.importorskip("wandb")
    tracker = {"type": "wandb", "mode": "offline", "project": "p"}
    with Bridge.from_config(base_config(tmp_path, "wandb", trackers=[tracker])) as bridge:
        for step in range(3):
            with pytest.raises(ReservedKeyError):
                bridge.log({"otel_bridge/step": float(step)}, step=step)
            bridge.log({"actor/loss": float(step)}, step=step)
        report = bridge.close()
    assert report.complete, report
    rows = [row for row in read_history(tmp_path / "wandb") if "actor/loss" in row]
    assert [row["actor/loss"] for row in rows] == [0.0, 1.0, 2.0]
