"""The wandb backend, read back from real offline runs' transaction logs (no network, no wandb server)."""

from __future__ import annotations

import dataclasses
import logging
import math
import queue
import random
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otel_bridge.errors import BackendError, ConfigError, install_hint
from otel_bridge.exporters.backends import wandb as wandb_backend
from otel_bridge.exporters.backends.base import Backend
from otel_bridge.exporters.backends.registry import create_backend
from otel_bridge.exporters.backends.wandb import STEP_KEY, WandbBackend, define_metric_name
from otel_bridge.exporters.record import StepRecord
from tests.helpers import wandb_reader
from tests.helpers.imported_when_used import ImportedWhenUsed
from tests.helpers.offline import T0, block_network, make_records
from tests.helpers.wandb_reader import (
    BLOCK_SIZE,
    chunk_kinds,
    find_transaction_log,
    leet_available,
    read_history,
    read_metric_definitions,
    read_records,
)

wandb = ImportedWhenUsed("wandb")

WANDB_FIELDS = {"_step", "_runtime", "_timestamp"}


@pytest.fixture(autouse=True)
def offline_wandb(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[object]]:
    """wandb in offline mode with its settings under tmp_path, and no connection beyond this machine."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    attempts = block_network(monkeypatch)
    wandb.teardown()  # wandb keeps process-wide settings from an earlier test's run; these tests read the env afresh
    try:
        yield attempts
    finally:
        if wandb.run is not None:
            wandb.run.finish()
        wandb.teardown()
    assert attempts == [], f"wandb tried to reach the network: {attempts}"


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return tmp_path / "runs" / "demo-run"


@pytest.fixture
def trainer_run(tmp_path: Path) -> Iterator[Any]:
    """The trainer's own wandb run, started before the bridge (which then attaches to it)."""
    run = wandb.init(project="trainer", dir=str(tmp_path / "trainer"), mode="offline")
    try:
        yield run
    finally:
        run.finish()


def bridge_keys(records: list[StepRecord]) -> set[str]:
    return {key for record in records for key in record.values}


def assert_bridge_series(rows: list[dict[str, Any]], records: list[StepRecord]) -> None:
    """Every record's values are in exactly one row, with otel_bridge/step = its step, in step order."""
    bridge_rows = [row for row in rows if STEP_KEY in row]
    assert [row[STEP_KEY] for row in bridge_rows] == [record.step for record in records]
    for row, record in zip(bridge_rows, records, strict=True):
        got = {key: value for key, value in row.items() if key in bridge_keys(records)}
        assert got == dict(record.values), f"step {record.step}"
    for key in bridge_keys(records):
        carrying = [row for row in rows if key in row]
        assert all(STEP_KEY in row for row in carrying), key


# --- a run the bridge creates: steps: own ---


def test_own_run_200_steps_read_back_complete_in_order(run_dir: Path) -> None:
    records = make_records()
    backend = create_backend("wandb", {"project": "otel-bridge-test", "tags": ["unit"]}, run_dir)
    assert isinstance(backend, WandbBackend)
    assert isinstance(backend, Backend)
    assert (backend.owns_run, backend.steps) == (True, "own")
    assert backend.run.name == "demo-run"
    for record in records:
        backend.write(record)
    backend.flush()
    backend.close()
    backend.close()
    assert wandb.run is None, "the bridge finishes the run it created"

    rows = read_history(run_dir / "wandb")
    assert [row["_step"] for row in rows] == [record.step for record in records]
    for row, record in zip(rows, records, strict=True):
        assert {key: value for key, value in row.items() if key not in WANDB_FIELDS} == {
            **record.values,
            STEP_KEY: record.step,
        }
    assert_bridge_series(rows, records)
    definitions = read_metric_definitions(run_dir / "wandb")
    assert definitions[STEP_KEY] == ""
    for key in bridge_keys(records):
        assert definitions[define_metric_name(key)] == STEP_KEY, key


def test_own_run_refuses_a_step_below_wandbs_current_step(run_dir: Path) -> None:
    backend = create_backend("wandb", {}, run_dir)
    try:
        backend.write(StepRecord(step=5, values={"a": 1.0}, time=T0, window_start=None))
        with pytest.raises(BackendError, match=r"step 3 is below run .*current step 6.*steps: follow"):
            backend.write(StepRecord(step=3, values={"a": 2.0}, time=T0, window_start=None))
    finally:
        backend.close()


def test_options_reach_the_created_run(run_dir: Path, tmp_path: Path) -> None:
    options = {
        "project": "proj",
        "name": "custom-name",
        "group": "g1",
        "tags": ["a", "b"],
        "config": {"lr": 0.1},
        "dir": str(tmp_path / "elsewhere"),
        "mode": "offline",
    }
    backend = create_backend("wandb", options, run_dir)
    assert isinstance(backend, WandbBackend)
    run = backend.run
    try:
        assert (run.project, run.name, run.group, tuple(run.tags)) == ("proj", "custom-name", "g1", ("a", "b"))
        assert run.config["lr"] == 0.1
        assert Path(run.dir).is_relative_to(tmp_path / "elsewhere" / "wandb")
    finally:
        backend.close()


# --- attached to the trainer's run: steps: follow ---


def test_attaches_to_the_active_run_and_never_finishes_it(trainer_run: Any, run_dir: Path) -> None:
    backend = create_backend("wandb", {}, run_dir)
    assert isinstance(backend, WandbBackend)
    assert backend.run is trainer_run
    assert (backend.owns_run, backend.steps) == (False, "follow")
    backend.write(make_records(1)[0])
    backend.close()
    assert wandb.run is trainer_run
    trainer_run.log({"after/close": 1.0}, step=7)  # the run still takes the trainer's rows
    assert not (run_dir / "wandb").exists(), "an attached backend makes no run directory of its own"


def test_attaching_ignores_options_for_a_new_run_with_a_warning(
    trainer_run: Any, run_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="otel_bridge.exporters.backends.wandb"):
        backend = create_backend("wandb", {"project": "other", "tags": ["x"]}, run_dir)
    backend.close()
    assert any("project, tags" in r.getMessage() and "ignored" in r.getMessage() for r in caplog.records)
    assert trainer_run.project == "trainer"


def _late_schedule(count: int, seed: int = 7) -> list[int]:
    """For trainer step n (1-based), how many bridge records get written right after the trainer logged it: a
    mix of on-time, late by one, bursts after stalls, and one record ahead of the trainer (written before the
    trainer's wandb.log of its step)."""
    rng = random.Random(seed)
    written, plan = 0, []
    for step in range(1, count + 1):
        due = step - written  # records of steps <= step not yet written
        if step % 37 == 0 or step > count - 3:
            burst = 0  # the worker stalls (at the end too: close() writes what is left)
        elif due > 1:
            burst = rng.randint(1, 3)  # catches up in a burst
        else:
            burst = rng.choice([0, 1, 1, 1, 2])  # usually on time, sometimes late, sometimes ahead
        burst = min(burst, step + 1 - written, count - written)  # never more than one step ahead
        plan.append(burst)
        written += burst
    return plan


def test_follow_mode_loses_nothing_when_bridge_records_arrive_after_the_trainers_next_step(
    trainer_run: Any, run_dir: Path
) -> None:
    records = make_records()
    backend = create_backend("wandb", {}, run_dir)
    pending = list(records)
    schedule = _late_schedule(len(records))
    ahead = [step for step in range(1, len(records) + 1) if sum(schedule[:step]) > step]
    assert ahead, "the schedule also writes records before the trainer logged their step"
    for step, burst in enumerate(schedule, start=1):
        trainer_run.log({"trainer_direct/reward": step * 0.5, "trainer_direct/step_time": 1.0 + step}, step=step)
        for _ in range(burst):
            backend.write(pending.pop(0))
    assert pending, "the schedule leaves records for close() to write"
    for record in pending:
        backend.write(record)
    backend.close()
    trainer_run.finish()

    rows = read_history(Path(trainer_run.dir).parent)
    trainer_rows = [row for row in rows if "trainer_direct/reward" in row]
    assert [row["_step"] for row in trainer_rows] == list(range(1, 201)), "wandb dropped none of the trainer's rows"
    assert all(row["trainer_direct/reward"] == row["_step"] * 0.5 for row in trainer_rows)
    assert_bridge_series(rows, records)
    assert [row["_step"] for row in rows] == sorted(row["_step"] for row in rows)
    bridge_steps = [row["_step"] for row in rows if STEP_KEY in row]
    assert len(set(bridge_steps)) == len(bridge_steps), "no wandb row holds two bridge records"
    assert max(row["_step"] - row[STEP_KEY] for row in rows if STEP_KEY in row) >= 2, "some records were late"


def test_follow_mode_with_a_trainer_thread_and_a_delivery_thread(trainer_run: Any, run_dir: Path) -> None:
    """The shape of the real pipeline: the trainer logs step n+1 while the worker still writes step n."""
    records = make_records()
    backend = create_backend("wandb", {}, run_dir)
    handoff: queue.Queue[StepRecord | None] = queue.Queue()
    errors: list[Exception] = []

    def worker() -> None:
        rng = random.Random(3)
        try:
            while (record := handoff.get()) is not None:
                if rng.random() < 0.3:
                    threading.Event().wait(rng.uniform(0.0, 0.004))
                backend.write(record)
            backend.close()
        except (BackendError, AssertionError) as err:  # surfaced by the assertion below
            errors.append(err)

    thread = threading.Thread(target=worker)
    thread.start()
    rng = random.Random(5)
    for record in records:
        trainer_run.log({"trainer_direct/reward": float(record.step)}, step=record.step)
        handoff.put(record)
        if rng.random() < 0.2:
            threading.Event().wait(0.002)
    handoff.put(None)
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert errors == []
    trainer_run.finish()

    rows = read_history(Path(trainer_run.dir).parent)
    assert [row["_step"] for row in rows if "trainer_direct/reward" in row] == list(range(1, 201))
    assert_bridge_series(rows, records)


def test_follow_mode_waits_for_the_trainers_next_row_and_writes_leftovers_at_close(
    trainer_run: Any, run_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(wandb_backend, "WAITING_WARN_THRESHOLD", 2)
    records = make_records(4)
    backend = create_backend("wandb", {}, run_dir)
    assert isinstance(backend, WandbBackend)
    trainer_run.log({"t": 1.0}, step=1)
    with caplog.at_level(logging.WARNING, logger="otel_bridge.exporters.backends.wandb"):
        for record in records[:3]:
            backend.write(record)
    assert [r.step for r in backend._waiting] == [2, 3]
    assert any("2 records (steps 2..3) are waiting" in r.getMessage() for r in caplog.records)
    trainer_run.log({"t": 2.0}, step=2)
    backend.flush()
    assert [r.step for r in backend._waiting] == [3]
    backend.write(records[3])
    backend.close()
    assert trainer_run.step == 5, "close() gave steps 3 and 4 rows of their own after the trainer's row 2"
    trainer_run.finish()

    rows = read_history(Path(trainer_run.dir).parent)
    assert [(row["_step"], row.get(STEP_KEY), row.get("t")) for row in rows] == [
        (1, 1, 1.0),
        (2, 2, 2.0),
        (3, 3, None),
        (4, 4, None),
    ]
    assert_bridge_series(rows, records)


def test_steps_own_can_be_chosen_for_an_attached_run(trainer_run: Any, run_dir: Path) -> None:
    backend = create_backend("wandb", {"steps": "own"}, run_dir)
    assert isinstance(backend, WandbBackend)
    assert (backend.owns_run, backend.steps) == (False, "own")
    records = make_records(3, first_step=10)
    for record in records:
        backend.write(record)
    backend.close()
    trainer_run.finish()
    rows = read_history(Path(trainer_run.dir).parent)
    assert [row["_step"] for row in rows] == [10, 11, 12]
    assert_bridge_series(rows, records)


# --- the logic, with a fake run ---


class FakeRun:
    """The few ``wandb.Run`` members the backend uses, with wandb's step rules."""

    id = "fake"

    def __init__(self) -> None:
        self.step = 0
        self.rows: dict[int, dict[str, float]] = {}
        self.defined: list[tuple[str, dict[str, Any]]] = []
        self.fail_next_log = False
        self.finished = False

    def define_metric(self, name: str, **kwargs: Any) -> None:
        self.defined.append((name, kwargs))

    def log(self, data: dict[str, float], step: int | None = None, commit: bool | None = None) -> None:
        if self.fail_next_log:
            self.fail_next_log = False
            raise wandb.Error("simulated failure")
        if step is not None:
            assert step >= self.step, "the backend logged below wandb's current step"
            self.step = step
        self.rows.setdefault(self.step, {}).update(data)
        if (step is None and commit is None) or commit:
            self.step += 1

    def finish(self) -> None:
        self.finished = True


def test_a_failed_log_raises_and_the_retry_writes_one_copy() -> None:
    run = FakeRun()
    backend = WandbBackend(run, owns_run=False, steps="follow", wandb_error=wandb.Error)
    first, second = make_records(2)
    run.log({"t": 1.0}, step=1)
    run.fail_next_log = True
    with pytest.raises(BackendError, match=r"cannot log step 1 to run fake: simulated failure"):
        backend.write(first)
    backend.write(first)  # the delivery thread's retry
    run.log({"t": 2.0}, step=2)
    backend.write(second)
    backend.close()
    assert [row[STEP_KEY] for _, row in sorted(run.rows.items())] == [1.0, 2.0]
    assert not run.finished, "never finish a run the bridge did not create"


def test_every_key_is_declared_once_against_the_step_metric() -> None:
    run = FakeRun()
    backend = WandbBackend(run, owns_run=True, steps="own", wandb_error=wandb.Error)
    for record in make_records(3):
        backend.write(record)
    backend.close()
    assert run.finished
    names = [name for name, _ in run.defined]
    assert names[0] == STEP_KEY
    assert run.defined[0][1] == {"hidden": True}
    assert len(names) == len(set(names))
    assert "trainer\\.tokens" in names
    assert "rollout/vllm/generation_tokens_total/delta/model_name\\.m" in names


@pytest.mark.parametrize(
    ("key", "escaped"),
    [("a/b", "a/b"), ("trainer.tokens", "trainer\\.tokens"), ("x*", "x\\*"), ("a\\b", "a\\\\b")],
)
def test_define_metric_name_escapes_dots_globs_and_backslashes(key: str, escaped: str) -> None:
    assert define_metric_name(key) == escaped


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"a": math.nan}, r"metric 'a' is nan"),
        ({"a": math.inf}, r"metric 'a' is inf"),
        ({STEP_KEY: 1.0}, r"has a metric named 'otel_bridge/step'"),
        ({"_step": 1.0}, r"metric key '_step' is empty or starts with '_'"),
    ],
)
def test_invalid_records_are_refused_and_nothing_is_logged(values: dict[str, float], message: str) -> None:
    run = FakeRun()
    for steps in ("own", "follow"):
        backend = WandbBackend(run, owns_run=False, steps=steps, wandb_error=wandb.Error)  # type: ignore[arg-type]
        with pytest.raises(BackendError, match=message):
            backend.write(StepRecord(step=1, values=values, time=T0, window_start=None))
        assert run.rows == {}
        assert list(backend._waiting) == []


def test_write_after_close_fails() -> None:
    backend = WandbBackend(FakeRun(), owns_run=True, steps="own", wandb_error=wandb.Error)
    backend.close()
    with pytest.raises(BackendError, match="is closed"):
        backend.write(make_records(1)[0])


# --- options ---


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"projekt": "x"}, r"unknown key 'projekt'; allowed keys here: .*project"),
        (
            {"mode": "online-ish"},
            r"'mode' = 'online-ish' is not allowed; expected 'online', 'offline', 'disabled' or 's",
        ),
        ({"steps": "mine"}, r"'steps' = 'mine' is not allowed; expected 'own' or 'follow'"),
        ({"tags": "a,b"}, r"'tags': must be a list of strings"),
        ({"tags": ["a", ""]}, r"'tags': must be a list of non-empty strings"),
        ({"config": ["lr"]}, r"'config': must be a mapping"),
        ({"project": ""}, r"'project': must be a non-empty string"),
        ({"dir": ""}, r"'dir': must be a non-empty path"),
    ],
)
def test_bad_options_are_named(options: dict[str, object], message: str, run_dir: Path) -> None:
    with pytest.raises(ConfigError, match=message):
        create_backend("wandb", options, run_dir)
    assert wandb.run is None


def test_missing_extra_is_a_config_error(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ConfigError, match=re.escape(install_hint("wandb"))):
        create_backend("wandb", {}, run_dir)


def test_the_two_readers_agree(run_dir: Path) -> None:
    """The suite reads wandb's logs with its own parser (``log``, tests/helpers/wandb_reader.py); wandb's own
    ``leet`` reads the same history and metric definitions from a log of several 32 KiB blocks whose records are split
    across them, one record larger than a block (first, middle and last chunks) among them."""
    if not leet_available():  # asked when the test runs: at collection it cost every worker a wandb process
        pytest.skip("this wandb has no 'wandb leet inspect'")
    backend = create_backend("wandb", {}, run_dir)
    records = make_records(200)
    wide = {f"rollout/vllm/num_requests_running/instance.10.0.{i // 256}.{i % 256}_8000": float(i) for i in range(2000)}
    records[100] = dataclasses.replace(records[100], values={**records[100].values, **wide})
    for record in records:
        backend.write(record)
    backend.close()
    history = read_history(run_dir, "log")  # once wandb-core has written the whole log
    log = find_transaction_log(run_dir)
    assert log.stat().st_size > 4 * BLOCK_SIZE
    assert {kind for _, kind in chunk_kinds(log.read_bytes())} >= {"full", "first", "middle", "last"}
    assert sum(1 for row in history if STEP_KEY in row) == 200
    assert history == read_history(run_dir, "leet")
    assert read_metric_definitions(run_dir, "log") == read_metric_definitions(run_dir, "leet")


def test_a_log_is_read_once_it_ends_with_the_exit_record(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """wandb-core writes the log in 32 KiB blocks and may still hold the last when ``run.finish()`` returns (a
    quick-tier run read 180 of 200 rows): the reader waits for the run's exit record, and a log that never gets one
    is an error naming it, not a short history."""
    backend = create_backend("wandb", {}, run_dir)
    for record in make_records(200):
        backend.write(record)
    backend.close()
    assert read_records(run_dir)[-1]["type"] == "exit"  # the whole log, once wandb-core has written it
    whole = find_transaction_log(run_dir).read_bytes()
    assert len(whole) > 2 * BLOCK_SIZE
    cut = tmp_path / "cut" / "run-cut.wandb"
    cut.parent.mkdir()
    cut.write_bytes(whole[: 2 * BLOCK_SIZE])  # what a reader can find on disk before the last blocks are written
    monkeypatch.setattr(wandb_reader, "COMPLETE_WITHIN_S", 0.5)
    with pytest.raises(AssertionError, match="holds no exit record"):
        read_history(cut)
    cut.write_bytes(whole)
    assert [row[STEP_KEY] for row in read_history(cut) if STEP_KEY in row] == list(range(1, 201))
