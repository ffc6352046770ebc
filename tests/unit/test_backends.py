"""Every backend writes 50 step records and they are read back exactly."""

from __future__ import annotations

import io
import json
import logging
import math
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from otel_bridge.errors import BackendError, ConfigError, install_hint
from otel_bridge.exporters.backends.base import Backend
from otel_bridge.exporters.backends.console import ConsoleBackend, format_record
from otel_bridge.exporters.backends.jsonl import JsonlBackend
from otel_bridge.exporters.backends.registry import BACKENDS, create_backend
from otel_bridge.exporters.backends.tensorboard import TensorBoardBackend
from otel_bridge.exporters.record import StepRecord

FIRST_STEP_NOTE = "first step: no previous boundary, counter/histogram statistics omitted"
T0 = 1_700_000_000.25


def make_records(count: int = 50, first_step: int = 1) -> list[StepRecord]:
    """Steps with trainer and infrastructure keys; some keys appear only on some steps."""
    records = []
    for index in range(count):
        step = first_step + index
        values: dict[str, float] = {
            "actor/loss": 1.0 / step,
            "critic/vf_loss": -0.5 * step,
            "trainer.tokens": float(1000 * step),
            "rollout/vllm/kv_cache_usage_perc/max": 0.01 * (step % 97),
            "timing s/gen": 1e-4 * step,
        }
        notes: tuple[str, ...] = ()
        window_start: float | None = T0 + 10.0 * (step - 1)
        if index == 0:
            window_start = None
            notes = (FIRST_STEP_NOTE,)
        else:
            values["rollout/vllm/generation_tokens_total/delta/model_name.m"] = float(512 * step)
        if step % 5 == 0:
            values["rollout/vllm/time_to_first_token_seconds/p99"] = 0.123456789 * step
        records.append(
            StepRecord(step=step, values=values, time=T0 + 10.0 * step, window_start=window_start, notes=notes)
        )
    return records


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return tmp_path / "run"


@pytest.fixture
def jsonl_backend(run_dir: Path) -> Iterator[Backend]:
    backend = create_backend("jsonl", {}, run_dir)
    try:
        yield backend
    finally:
        backend.close()


# --- registry ---


def test_registry_knows_the_built_in_backends() -> None:
    assert set(BACKENDS) == {"jsonl", "tensorboard", "console", "wandb", "mlflow", "trackio"}


def test_unknown_kind_lists_the_known_kinds(run_dir: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"unknown tracker 'wandbb'.*console, jsonl, mlflow, tensorboard, trackio, wandb"
    ):
        create_backend("wandbb", {}, run_dir)


@pytest.mark.parametrize(("typo", "meant"), [("tensorbord", "tensorboard"), ("jsnl", "jsonl"), ("ml-flow", "mlflow")])
def test_a_misspelt_tracker_gets_a_did_you_mean(run_dir: Path, typo: str, meant: str) -> None:
    """Issue 26 (via issue 27's scope): ``tensorbord`` got no suggestion."""
    with pytest.raises(ConfigError, match=f"unknown tracker '{typo}'; did you mean '{meant}'\\?"):
        create_backend(typo, {}, run_dir)


@pytest.mark.parametrize(
    ("kind", "options", "message"),
    [
        ("jsonl", {"pth": "x.jsonl"}, r"unknown key 'pth'; allowed keys here: .*path"),
        ("jsonl", {"path": ""}, r"'path': must be a non-empty path"),
        ("jsonl", {"path": 3}, r"'path': must be a non-empty path"),
        ("tensorboard", {"log_dir": "tb"}, r"unknown key 'log_dir'; allowed keys here: .*logdir"),
        ("console", {"every": 0}, r"'every': must be an integer >= 1, got 0"),
        ("console", {"every": True}, r"'every': must be an integer >= 1, got True"),
        ("console", {"max_keys": "5"}, r"'max_keys': must be an integer >= 1"),
        ("console", {"stream": "stdlog"}, r"'stream' = 'stdlog' is not allowed; expected 'stdout' or 'stderr'"),
        (
            "console",
            {"every": 1, "colour": True, "width": 3},
            r"\(2 problems\):\n  - unknown key 'colour'.*\n  - unknown key 'width",
        ),
    ],
)
def test_bad_options_are_named(kind: str, options: dict[str, object], message: str, run_dir: Path) -> None:
    with pytest.raises(ConfigError, match=message):
        create_backend(kind, options, run_dir)


def test_created_backends_follow_the_protocol(run_dir: Path) -> None:
    for kind in ("console", "jsonl", "tensorboard"):  # the others have read-back tests of their own
        backend = create_backend(kind, {}, run_dir)
        try:
            assert isinstance(backend, Backend)
            assert backend.name == kind
        finally:
            backend.close()


def test_paths_are_relative_to_the_run_dir(run_dir: Path, tmp_path: Path) -> None:
    default = create_backend("jsonl", {}, run_dir)
    relative = create_backend("jsonl", {"path": "sub/m.jsonl"}, run_dir)
    absolute = create_backend("jsonl", {"path": str(tmp_path / "abs.jsonl")}, run_dir)
    tensorboard = create_backend("tensorboard", {"logdir": "tb"}, run_dir)
    try:
        assert isinstance(default, JsonlBackend)
        assert isinstance(relative, JsonlBackend)
        assert isinstance(absolute, JsonlBackend)
        assert isinstance(tensorboard, TensorBoardBackend)
        assert default.path == run_dir / "metrics.jsonl"
        assert relative.path == run_dir / "sub" / "m.jsonl"
        assert absolute.path == tmp_path / "abs.jsonl"
        assert tensorboard.logdir == run_dir / "tb"
        assert list((run_dir / "tb").glob("events.out.tfevents.*"))
    finally:
        for backend in (default, relative, absolute, tensorboard):
            backend.close()


# --- jsonl ---


def read_jsonl(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def expected_json(record: StepRecord) -> dict[str, object]:
    obj: dict[str, object] = {"step": record.step, "time": record.time, "window_start": record.window_start}
    obj.update(record.values)
    if record.notes:
        obj["_notes"] = list(record.notes)
    return obj


def test_jsonl_writes_and_reads_back_50_records(jsonl_backend: Backend, run_dir: Path) -> None:
    records = make_records()
    for record in records:
        jsonl_backend.write(record)
    jsonl_backend.flush()
    lines = read_jsonl(run_dir / "metrics.jsonl")
    assert lines == [expected_json(record) for record in records]
    first = lines[0]
    assert list(first)[:3] == ["step", "time", "window_start"]
    assert list(first)[3:-1] == sorted(records[0].values)
    assert first["_notes"] == [FIRST_STEP_NOTE]
    assert "_notes" not in lines[1]


def test_jsonl_each_record_is_on_disk_after_write(jsonl_backend: Backend, run_dir: Path) -> None:
    for count, record in enumerate(make_records(3), start=1):
        jsonl_backend.write(record)
        assert len(read_jsonl(run_dir / "metrics.jsonl")) == count


def test_jsonl_appends_across_two_instances(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "dir" / "m.jsonl"
    records = make_records()
    first = JsonlBackend(path)
    try:
        for record in records[:25]:
            first.write(record)
    finally:
        first.close()
    second = JsonlBackend(path)
    try:
        for record in records[25:]:
            second.write(record)
    finally:
        second.close()
    assert read_jsonl(path) == [expected_json(record) for record in records]


def test_jsonl_terminates_a_partial_last_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1, "time": 1.0}\n{"step": 2, "ti', encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="otel_bridge.exporters.backends.jsonl"):
        backend = JsonlBackend(path)
    try:
        backend.write(make_records(3)[2])
    finally:
        backend.close()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[1] == '{"step": 2, "ti'
    assert json.loads(lines[2])["step"] == 3
    assert any("partial line" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_jsonl_refuses_non_finite_values(jsonl_backend: Backend, run_dir: Path, bad: float) -> None:
    record = StepRecord(step=1, values={"a": 1.0, "b": bad}, time=T0, window_start=None)
    with pytest.raises(BackendError, match=r"metric 'b' is"):
        jsonl_backend.write(record)
    assert (run_dir / "metrics.jsonl").read_text(encoding="utf-8") == ""


@pytest.mark.parametrize("key", ["step", "time", "window_start", "_notes"])
def test_jsonl_refuses_keys_that_shadow_record_fields(jsonl_backend: Backend, key: str) -> None:
    with pytest.raises(BackendError, match=f"metric key '{key}' clashes"):
        jsonl_backend.write(StepRecord(step=1, values={key: 1.0}, time=T0, window_start=None))


def test_jsonl_write_after_close_fails(run_dir: Path) -> None:
    backend = JsonlBackend(run_dir / "m.jsonl")
    backend.close()
    backend.close()
    with pytest.raises(BackendError, match="is closed"):
        backend.write(make_records(1)[0])


def test_jsonl_unopenable_path_is_a_backend_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("x", encoding="utf-8")
    with pytest.raises(BackendError, match="cannot open"):
        JsonlBackend(blocker / "m.jsonl")


# --- tensorboard ---


def read_scalars(logdir: Path) -> dict[str, list[tuple[int, float, float]]]:
    accumulator = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {
        tag: [(event.step, event.value, event.wall_time) for event in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


def test_tensorboard_writes_and_reads_back_50_records(run_dir: Path) -> None:
    records = make_records()
    backend = create_backend("tensorboard", {}, run_dir)
    try:
        for record in records:
            backend.write(record)
        backend.flush()
        scalars = read_scalars(run_dir / "tensorboard")
    finally:
        backend.close()
    expected: dict[str, list[tuple[int, float, float]]] = {}
    for record in records:
        for key, value in record.values.items():
            expected.setdefault(key, []).append((record.step, value, record.time))
    assert set(scalars) == set(expected)
    for key, points in expected.items():
        got = scalars[key]
        assert [step for step, _, _ in got] == [step for step, _, _ in points], key
        assert [wall for _, _, wall in got] == [wall for _, _, wall in points], key
        for (_, got_value, _), (_, value, _) in zip(got, points, strict=True):
            assert got_value == pytest.approx(value, rel=1e-6, abs=1e-30), key


def test_tensorboard_skips_values_beyond_float32_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    backend = TensorBoardBackend(tmp_path / "tb")
    try:
        with caplog.at_level(logging.WARNING, logger="otel_bridge.exporters.backends.tensorboard"):
            for step in (1, 2):
                backend.write(StepRecord(step=step, values={"big": 1e300, "ok": 2.0}, time=T0, window_start=None))
        scalars = read_scalars(tmp_path / "tb")
    finally:
        backend.close()
    assert set(scalars) == {"ok"}
    assert [r.getMessage() for r in caplog.records if "'big'" in r.getMessage()] != []
    assert len([r for r in caplog.records if "'big'" in r.getMessage()]) == 1


def test_tensorboard_refuses_non_finite_values(tmp_path: Path) -> None:
    backend = TensorBoardBackend(tmp_path / "tb")
    try:
        with pytest.raises(BackendError, match=r"metric 'x' is nan"):
            backend.write(StepRecord(step=1, values={"x": math.nan}, time=T0, window_start=None))
    finally:
        backend.close()


def test_tensorboard_write_after_close_fails(tmp_path: Path) -> None:
    backend = TensorBoardBackend(tmp_path / "tb")
    backend.close()
    backend.close()
    with pytest.raises(BackendError, match="is closed"):
        backend.write(make_records(1)[0])


def test_tensorboard_missing_extra_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes the import fail as if the package were not installed.
    monkeypatch.setitem(sys.modules, "tensorboard.summary.writer.event_file_writer", None)
    with pytest.raises(ConfigError, match=re.escape(install_hint("tensorboard"))):
        create_backend("tensorboard", {}, tmp_path)
    assert not (tmp_path / "tensorboard").exists()


# --- console ---


def test_console_writes_one_line_per_step_for_50_records() -> None:
    stream = io.StringIO()
    backend = ConsoleBackend(stream=stream, max_keys=50)
    records = make_records()
    for record in records:
        backend.write(record)
    backend.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 50
    for line, record in zip(lines, records, strict=True):
        parts = line.split(" | ")
        assert parts[0] == f"step {record.step}"
        shown = dict(part.split("=", 1) for part in parts[1:] if not part.startswith("note: "))
        trainer = sorted(k for k in record.values if not k.startswith("rollout/"))  # every trainer key first
        assert list(shown) == trainer + sorted(k for k in record.values if k.startswith("rollout/"))
        assert shown == {key: f"{value:.4g}" for key, value in record.values.items()}
        for key, text in shown.items():
            assert float(text) == pytest.approx(record.values[key], rel=1e-3)
    assert lines[0].endswith(f" | note: {FIRST_STEP_NOTE}")


def test_console_line_format_is_exact() -> None:
    record = StepRecord(
        step=12,
        values={
            "rollout/vllm/generation_tokens_total/delta": 512.0,
            "rollout/vllm/kv_cache_usage_perc/max": 0.5,
            "actor/loss": 0.3112345,
            "z": 1.0,
            "otel_bridge/query_errors": 0.0,
        },
        time=T0,
        window_start=T0 - 10,
        notes=("n1",),
    )
    assert format_record(record, max_keys=1) == (
        "step 12 | actor/loss=0.3112 | z=1 | rollout/vllm/generation_tokens_total/delta=512 | (+1 more) | note: n1 "
        "| health: query_errors=0"
    )


def test_console_every_n_steps() -> None:
    stream = io.StringIO()
    backend = ConsoleBackend(stream=stream, every=10, max_keys=1)
    for record in make_records():
        backend.write(record)
    steps = [line.split(" | ")[0] for line in stream.getvalue().splitlines()]
    assert steps == ["step 10", "step 20", "step 30", "step 40", "step 50"]


def test_console_defaults_to_the_current_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    backend = create_backend("console", {"max_keys": 1}, Path("unused"))
    backend.write(make_records(7)[6])
    backend.close()
    assert capsys.readouterr().out == (
        "step 7 | actor/loss=0.1429 | critic/vf_loss=-3.5 | timing s/gen=0.0007 | trainer.tokens=7000 "
        "| rollout/vllm/generation_tokens_total/delta/model_name.m=3584 | (+1 more)\n"
    )


def test_console_options_reach_the_backend(capsys: pytest.CaptureFixture[str]) -> None:
    backend = create_backend("console", {"every": 3, "max_keys": 2, "stream": "stderr"}, Path("unused"))
    assert isinstance(backend, ConsoleBackend)
    assert (backend.every, backend.max_keys, backend.stream) == (3, 2, sys.stderr)
    backend.write(make_records(3)[2])
    backend.close()
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "step 3 | actor/loss=0.3333 | critic/vf_loss=-1.5 | timing s/gen=0.0003 | trainer.tokens=3000 "
        "| rollout/vllm/generation_tokens_total/delta/model_name.m=1536 | rollout/vllm/kv_cache_usage_perc/max=0.03\n"
    )


def test_console_closed_stream_is_a_backend_error() -> None:
    stream = io.StringIO()
    backend = ConsoleBackend(stream=stream)
    stream.close()
    with pytest.raises(BackendError, match="cannot write step 1"):
        backend.write(make_records(1)[0])
