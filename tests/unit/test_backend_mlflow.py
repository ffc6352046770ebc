"""The MLflow backend, read back with MlflowClient.get_metric_history from a local SQLite tracking store."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from otel_bridge.errors import BackendError, ConfigError, install_hint
from otel_bridge.exporters.backends.base import Backend
from otel_bridge.exporters.backends.mlflow import MAX_METRICS_PER_BATCH, MlflowBackend, mlflow_key_problem
from otel_bridge.exporters.backends.registry import create_backend
from otel_bridge.exporters.record import StepRecord
from tests.helpers.imported_when_used import ImportedWhenUsed
from tests.helpers.mlflow_store import new_store
from tests.helpers.offline import T0, block_network, make_records

mlflow = ImportedWhenUsed("mlflow")
mlflow_entities = ImportedWhenUsed("mlflow.entities")
mlflow_exceptions = ImportedWhenUsed("mlflow.exceptions")
mlflow_tracking = ImportedWhenUsed("mlflow.tracking")


def mlflow_types() -> dict[str, Any]:
    """The MLflow types a backend built by hand is given (``create_backend`` passes the same)."""
    return {"metric_type": mlflow_entities.Metric, "mlflow_error": mlflow_exceptions.MlflowException}


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """MLflow telemetry off, and no connection beyond this machine."""
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("DO_NOT_TRACK", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    attempts = block_network(monkeypatch)
    active_run, end_run = mlflow.active_run, mlflow.end_run  # a test may hide mlflow (sys.modules) until teardown
    try:
        yield
    finally:
        while active_run() is not None:
            end_run()
    assert attempts == [], f"mlflow tried to reach the network: {attempts}"


@pytest.fixture(scope="module")
def tracking_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite store for the module; every test uses runs of its own."""
    return new_store(tmp_path_factory.mktemp("mlflow") / "mlflow.db")


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return tmp_path / "runs" / "demo-run"


def history(client: Any, run_id: str, key: str) -> list[tuple[int, float, int]]:
    return [(m.step, m.value, m.timestamp) for m in client.get_metric_history(run_id, key)]


def expected_history(records: list[StepRecord]) -> dict[str, list[tuple[int, float, int]]]:
    expected: dict[str, list[tuple[int, float, int]]] = {}
    for record in records:
        for key, value in record.values.items():
            expected.setdefault(key, []).append((record.step, value, round(record.time * 1000)))
    return expected


def test_200_steps_read_back_complete_ordered_and_exact(tracking_uri: str, run_dir: Path) -> None:
    records = make_records()
    backend = create_backend("mlflow", {"tracking_uri": tracking_uri, "experiment": "otel-bridge-test"}, run_dir)
    assert isinstance(backend, MlflowBackend)
    assert isinstance(backend, Backend)
    assert backend.owns_run
    for record in records:
        backend.write(record)
    backend.flush()
    backend.close()
    backend.close()

    client = mlflow_tracking.MlflowClient(tracking_uri=tracking_uri)
    run = client.get_run(backend.run_id)
    assert run.info.status == "FINISHED", "the bridge ends the run it created"
    assert run.info.run_name == "demo-run"
    assert client.get_experiment(run.info.experiment_id).name == "otel-bridge-test"
    expected = expected_history(records)
    assert set(run.data.metrics) == set(expected)
    for key, points in expected.items():
        got = history(client, backend.run_id, key)
        assert got == points, key  # complete, in step order, exact values, the record's time in ms
    assert mlflow.active_run() is None, "the bridge's run is not made the trainer's active run"


def test_a_record_with_more_than_1000_keys_is_split_into_batches(
    tracking_uri: str, run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = create_backend("mlflow", {"tracking_uri": tracking_uri}, run_dir)
    assert isinstance(backend, MlflowBackend)
    sizes: list[int] = []
    real_log_batch = backend.client.log_batch

    def spy(run_id: str, metrics: list[Any], **kwargs: Any) -> Any:
        sizes.append(len(metrics))
        return real_log_batch(run_id, metrics=metrics, **kwargs)

    monkeypatch.setattr(backend.client, "log_batch", spy)
    values = {f"rollout/gpu/util/gpu.{i:04d}": float(i) for i in range(2 * MAX_METRICS_PER_BATCH + 500)}
    backend.write(StepRecord(step=3, values=values, time=T0, window_start=None))
    backend.close()
    assert sizes == [1000, 1000, 500]
    run = mlflow_tracking.MlflowClient(tracking_uri=tracking_uri).get_run(backend.run_id)
    assert run.data.metrics == values


class FlakyClient:
    """Fails the n-th log_batch call once; records the keys of each successful batch."""

    def __init__(self, fail_call: int) -> None:
        self.fail_call = fail_call
        self.calls = 0
        self.batches: list[list[str]] = []

    def log_batch(self, run_id: str, metrics: list[Any], synchronous: bool) -> None:
        self.calls += 1
        if self.calls == self.fail_call:
            raise mlflow_exceptions.MlflowException("simulated: database is locked")
        self.batches.append([m.key for m in metrics])


def test_a_retried_record_resumes_after_the_batches_already_logged() -> None:
    client = FlakyClient(fail_call=2)
    backend = MlflowBackend(client, "r1", owns_run=False, **mlflow_types())
    values = {f"k{i:04d}": float(i) for i in range(2500)}
    record = StepRecord(step=1, values=values, time=T0, window_start=None)
    with pytest.raises(BackendError, match=r"cannot log step 1 \(batch 2 of 3\) to run r1: .*database is locked"):
        backend.write(record)
    backend.write(record)
    flat = [key for batch in client.batches for key in batch]
    assert flat == sorted(values), "each metric logged exactly once"
    backend.write(StepRecord(step=2, values={"a": 1.0}, time=T0, window_start=None))
    assert client.batches[-1] == ["a"]


def test_logs_into_run_id_and_never_ends_it(tracking_uri: str, run_dir: Path) -> None:
    client = mlflow_tracking.MlflowClient(tracking_uri=tracking_uri)
    experiment_id = client.create_experiment("trainer-exp")
    trainer_run = client.create_run(experiment_id, run_name="trainer")
    client.log_metric(trainer_run.info.run_id, "trainer/own", 1.5, step=1)
    backend = create_backend("mlflow", {"tracking_uri": tracking_uri, "run_id": trainer_run.info.run_id}, run_dir)
    assert isinstance(backend, MlflowBackend)
    assert not backend.owns_run
    records = make_records(20)
    for record in records:
        backend.write(record)
    backend.close()
    run = client.get_run(trainer_run.info.run_id)
    assert run.info.status == "RUNNING"
    assert history(client, run.info.run_id, "actor/loss") == expected_history(records)["actor/loss"]
    assert history(client, run.info.run_id, "trainer/own")[0][:2] == (1, 1.5)


def test_logs_into_the_active_run_and_never_ends_it(
    tracking_uri: str, run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_uri)
    active = mlflow.start_run(run_name="trainer")
    backend = create_backend("mlflow", {}, run_dir)
    assert isinstance(backend, MlflowBackend)
    assert (backend.run_id, backend.owns_run) == (active.info.run_id, False)
    backend.write(make_records(1)[0])
    backend.close()
    assert mlflow.active_run() is not None
    mlflow.log_metric("trainer/after", 2.0, step=2)
    mlflow.end_run()
    run = mlflow_tracking.MlflowClient(tracking_uri=tracking_uri).get_run(active.info.run_id)
    assert run.data.metrics["actor/loss"] == 1.0
    assert run.data.metrics["trainer/after"] == 2.0


def test_an_active_run_on_another_tracking_uri_is_a_config_error(
    tracking_uri: str, run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_uri)
    mlflow.start_run()
    other = f"sqlite:///{tmp_path / 'other.db'}"
    with pytest.raises(ConfigError, match=r"is active on sqlite:.*mlflow\.db.*remove tracking_uri"):
        create_backend("mlflow", {"tracking_uri": other}, run_dir)


def test_an_unknown_run_id_is_a_backend_error(tracking_uri: str, run_dir: Path) -> None:
    with pytest.raises(BackendError, match=r"cannot find run '0123456789abcdef'.*check run_id and tracking_uri"):
        create_backend("mlflow", {"tracking_uri": tracking_uri, "run_id": "0123456789abcdef"}, run_dir)


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("a//b", "would resolve to 'a/b'"),
        ("a/", "would resolve to 'a'"),
        ("/a", "would resolve to '/a'"),
        ("../a", "would resolve to '../a'"),
        ("a/./b", "would resolve to 'a/b'"),
        ("bad{key}", "characters other than"),
        ("k=v", "characters other than"),
        ("x" * 251, "251 characters long"),
        ("", "empty"),
    ],
)
def test_invalid_keys_are_refused_naming_the_key(key: str, problem: str) -> None:
    assert problem in (mlflow_key_problem(key) or "")
    client = FlakyClient(fail_call=0)
    backend = MlflowBackend(client, "r1", owns_run=False, **mlflow_types())
    with pytest.raises(BackendError, match=rf"metric key {key!r}".replace("{", "\\{").replace("}", "\\}")[:60]):
        backend.write(StepRecord(step=1, values={"ok": 1.0, key: 2.0}, time=T0, window_start=None))
    assert client.batches == [], "nothing of the record is logged"


@pytest.mark.parametrize("key", ["actor/loss", "trainer.tokens", "timing s/gen", "a-b_c.d/e f", "x" * 250])
def test_valid_keys_pass(key: str) -> None:
    assert mlflow_key_problem(key) is None


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_values_are_refused(bad: float) -> None:
    backend = MlflowBackend(FlakyClient(0), "r1", owns_run=False, **mlflow_types())
    with pytest.raises(BackendError, match=r"metric 'b' is"):
        backend.write(StepRecord(step=1, values={"a": 1.0, "b": bad}, time=T0, window_start=None))


def test_write_after_close_fails() -> None:
    backend = MlflowBackend(FlakyClient(0), "r1", owns_run=False, **mlflow_types())
    backend.close()
    with pytest.raises(BackendError, match="is closed"):
        backend.write(make_records(1)[0])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tracking": "x"}, r"unknown key 'tracking'; allowed keys here: .*tracking_uri"),
        ({"run_id": 5}, r"'run_id': must be a non-empty string"),
        ({"tags": ["a"]}, r"'tags': must be a mapping"),
        ({"experiment": " "}, r"'experiment': must be a non-empty string"),
    ],
)
def test_bad_options_are_named(options: dict[str, object], message: str, run_dir: Path) -> None:
    with pytest.raises(ConfigError, match=message):
        create_backend("mlflow", options, run_dir)


def test_missing_extra_is_a_config_error(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mlflow", None)
    with pytest.raises(ConfigError, match=re.escape(install_hint("mlflow"))):
        create_backend("mlflow", {}, run_dir)
