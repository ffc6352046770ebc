"""The trackio backend, read back from trackio's local SQLite store (no Space, no network)."""

from __future__ import annotations

import math
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otel_bridge.errors import BackendError, ConfigError, install_hint
from otel_bridge.exporters.backends.base import Backend
from otel_bridge.exporters.backends.registry import create_backend
from otel_bridge.exporters.backends.trackio import TrackioBackend
from otel_bridge.exporters.record import StepRecord
from tests.helpers.offline import T0, block_network, make_records


@pytest.fixture(scope="module")
def trackio_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """trackio's process-wide store, pointed at a temporary directory before (or, if trackio was already
    imported, in place of) the one it read from $TRACKIO_DIR."""
    store = tmp_path_factory.mktemp("trackio")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRACKIO_DIR", str(store))
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        for variable in ("TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL", "TRACKIO_BUCKET_ID", "TRACKIO_DATASET_ID"):
            patch.delenv(variable, raising=False)
        pytest.importorskip("trackio")
        for name, module in list(sys.modules.items()):
            if (name == "trackio" or name.startswith("trackio.")) and hasattr(module, "TRACKIO_DIR"):
                patch.setattr(module, "TRACKIO_DIR", store)
        yield store


@pytest.fixture(autouse=True)
def no_network(trackio_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No connection beyond this machine; no trackio run left current for the next test."""
    from trackio import context_vars

    attempts = block_network(monkeypatch)
    try:
        yield
    finally:
        current = context_vars.current_run.get()
        if current is not None:
            current.finish()
            context_vars.current_run.set(None)
    assert attempts == [], f"trackio tried to reach the network: {attempts}"


def read_logs(project: str, run: str) -> list[dict[str, Any]]:
    from trackio.sqlite_storage import SQLiteStorage

    return list(SQLiteStorage.get_logs(project, run))


def metrics_of(row: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in row.items() if key not in ("step", "timestamp")}


def test_200_steps_read_back_complete_ordered_and_exact(tmp_path: Path, trackio_dir: Path) -> None:
    from trackio import context_vars

    records = make_records()
    run_dir = tmp_path / "runs" / "demo-run-200"
    backend = create_backend("trackio", {"project": "bridge-200"}, run_dir)
    assert isinstance(backend, TrackioBackend)
    assert isinstance(backend, Backend)
    assert backend.owns_run
    assert context_vars.current_run.get() is None, "the bridge's run does not become the trainer's current run"
    writer = threading.Thread(target=lambda: [backend.write(record) for record in records])
    writer.start()  # the bridge writes from a delivery thread
    writer.join()
    backend.flush()
    backend.close()
    backend.close()

    rows = read_logs("bridge-200", "demo-run-200")
    assert [row["step"] for row in rows] == [record.step for record in records]
    for row, record in zip(rows, records, strict=True):
        assert metrics_of(row) == dict(record.values), f"step {record.step}"
    assert (trackio_dir / "bridge-200.db").exists()


def test_attaches_to_the_trainers_run_and_never_finishes_it(tmp_path: Path) -> None:
    import trackio

    trainer_run = trackio.init(project="shared", name="trainer-run", embed=False, auto_log_cpu=False)
    backend = create_backend("trackio", {}, tmp_path / "runs" / "ignored")
    assert isinstance(backend, TrackioBackend)
    assert backend.run is trainer_run
    assert not backend.owns_run
    records = make_records(30)
    for record in records:
        trackio.log({"trainer_direct/reward": float(record.step)}, step=record.step)
    writer = threading.Thread(target=lambda: [backend.write(record) for record in records])
    writer.start()  # late: after the trainer logged every step
    writer.join()
    backend.close()
    trackio.log({"trainer_direct/after_close": 1.0}, step=31)  # still the trainer's open run
    trackio.finish()

    rows = read_logs("shared", "trainer-run")
    bridge_rows = [row for row in rows if "actor/loss" in row]
    assert [row["step"] for row in bridge_rows] == [record.step for record in records]
    for row, record in zip(bridge_rows, records, strict=True):
        assert metrics_of(row) == dict(record.values)
    trainer_rows = [row for row in rows if "trainer_direct/reward" in row]
    assert [row["step"] for row in trainer_rows] == list(range(1, 31))
    assert any("trainer_direct/after_close" in row for row in rows)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"a": math.nan}, r"metric 'a' is nan"),
        ({"a": -math.inf}, r"metric 'a' is -inf"),
        ({"timestamp": 1.0}, r"metric key 'timestamp' is reserved by trackio"),
        ({"__x": 1.0}, r"metric key '__x' is reserved by trackio"),
    ],
)
def test_invalid_records_are_refused(values: dict[str, float], message: str) -> None:
    logged: list[object] = []

    class FakeRun:
        name = "fake"

        def log(self, metrics: dict[str, float], step: int | None = None) -> None:
            logged.append((metrics, step))

    backend = TrackioBackend(FakeRun(), owns_run=False)
    with pytest.raises(BackendError, match=message):
        backend.write(StepRecord(step=1, values=values, time=T0, window_start=None))
    assert logged == []
    backend.close()
    with pytest.raises(BackendError, match="is closed"):
        backend.write(StepRecord(step=2, values={"a": 1.0}, time=T0, window_start=None))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"projekt": "x"}, r"unknown key 'projekt'; allowed keys here: .*project"),
        ({"project": ""}, r"'project': must be a non-empty string"),
        ({"config": "lr=1"}, r"'config': must be a mapping"),
    ],
)
def test_bad_options_are_named(options: dict[str, object], message: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=message):
        create_backend("trackio", options, tmp_path)


def test_missing_extra_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "trackio", None)
    with pytest.raises(ConfigError, match=re.escape(install_hint("trackio"))):
        create_backend("trackio", {}, tmp_path)
