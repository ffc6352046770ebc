"""A tracker URL's password is never printed by otel-bridge, nor through it (issue 37 finding 6).

Before, with MLflow's ``tracking_uri: http://admin:<pw>@host``: the bridge's own INFO record said ``mlflow: created run
... at http://admin:<pw>@...``; when MLflow answered 500 or was down, the ``BackendError`` text was redacted but its
chained ``MlflowException`` (the traceback a trainer prints) held the password; MLflow's "View run at
http://admin:<pw>@..." line, printed when the bridge ends its run, reached the terminal and ``doctor``'s text and
``--json`` output; an unknown tracker option named ``api_key`` or ``token`` showed its value in
``repr(BridgeConfig)``. Against a real ``mlflow server`` (sqlite store) on loopback, a scripted server answering
500, and a closed port.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from otel_bridge import BridgeConfig
from otel_bridge.errors import BackendError
from otel_bridge.exporters.backends.registry import create_backend
from otel_bridge.exporters.record import StepRecord
from tests.cli.support import run_cli, stop_process, validate_doctor_json, write_config
from tests.helpers.http_servers import Response, ScriptedHTTPServer, free_port
from tests.helpers.mlflow_store import new_store

pytestmark = pytest.mark.integration

PASSWORD = "s3cr3t-Pa55word-37"
QUICK_MLFLOW = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


@pytest.fixture(autouse=True, scope="module")
def _mlflow_installed() -> None:
    """Every test here needs MLflow: imported when they run, not by every worker collecting this module."""
    pytest.importorskip("mlflow")


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A real ``mlflow server`` on a free loopback port, its store in sqlite; stopped by PID."""
    workdir = tmp_path_factory.mktemp("mlflow-server")
    store = new_store(workdir / "mlflow.db")
    port = free_port()
    log = (workdir / "server.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            store,
            "--default-artifact-root",
            str(workdir / "artifacts"),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 300
        while True:
            assert process.poll() is None, (workdir / "server.log").read_text()
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, "mlflow server did not start within 300 s"
            time.sleep(0.5)
        yield port
    finally:
        stop_process(process)
        log.close()


def _record() -> StepRecord:
    return StepRecord(step=0, values={"loss": 1.0}, time=time.time(), window_start=None)


def test_the_run_the_bridge_creates_and_ends_never_shows_the_password(
    mlflow_server: int,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in QUICK_MLFLOW.items():
        monkeypatch.setenv(name, value)
    uri = f"http://admin:{PASSWORD}@127.0.0.1:{mlflow_server}"
    with caplog.at_level(logging.DEBUG):
        backend = create_backend("mlflow", {"tracking_uri": uri, "experiment": "secrets"}, tmp_path / "run")
        backend.write(_record())
        backend.close()
    out, err = capfd.readouterr()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "created run" in logged
    assert f"127.0.0.1:{mlflow_server}" in logged
    assert "View run" in out  # MLflow's line still reaches the terminal, redacted
    assert "admin:xxxxx@" in out or "xxxxx@" in out
    for text in (logged, out, err):
        assert PASSWORD not in text


@pytest.mark.parametrize("failure", ["answers 500", "is down"])
def test_a_failing_tracking_server_never_shows_the_password_in_the_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    for name, value in QUICK_MLFLOW.items():
        monkeypatch.setenv(name, value)
    server = None
    if failure == "answers 500":
        server = ScriptedHTTPServer(lambda request: Response(status=500, body=b'{"error_code": "INTERNAL_ERROR"}'))
        port = server.port
    else:
        port = free_port()
    try:
        with pytest.raises(BackendError) as caught:
            create_backend("mlflow", {"tracking_uri": f"http://admin:{PASSWORD}@127.0.0.1:{port}"}, tmp_path / "run")
    finally:
        if server is not None:
            server.close()
    printed = "".join(traceback.format_exception(caught.value))
    assert PASSWORD not in printed, printed
    assert "MlflowException" in printed or "ConnectionError" in printed or "MaxRetryError" in printed
    assert f"127.0.0.1:{port}" in printed  # where it failed is still said


def test_unknown_tracker_options_naming_credentials_are_hidden_in_the_repr() -> None:
    config = BridgeConfig.load(
        {
            "trackers": [
                {"type": "mlflow", "api_key": PASSWORD, "experiment": "e"},
                {"type": "wandb", "token": PASSWORD, "project": "p"},
                {"type": "jsonl", "Secret_Header": PASSWORD},
            ]
        },
        environ={},
    )
    for shown in (repr(config), str(config), repr(config.trackers[0]), str(config.trackers[1])):
        assert PASSWORD not in shown
        assert "api_key" in shown or "token" in shown or "Secret_Header" in shown
    assert "'e'" in repr(config.trackers[0])  # other options are shown
    assert config.trackers[0].options()["api_key"] == PASSWORD  # the value is kept for the backend


@pytest.mark.parametrize("json_output", [False, True])
def test_doctor_never_prints_the_tracking_uri_password(mlflow_server: int, tmp_path: Path, json_output: bool) -> None:
    config = write_config(
        tmp_path / "otel-bridge.yaml",
        {"trackers": [{"type": "mlflow", "tracking_uri": f"http://admin:{PASSWORD}@127.0.0.1:{mlflow_server}"}]},
    )
    done = run_cli(
        ["doctor", "--config", str(config), *(["--json"] if json_output else [])],
        cwd=tmp_path,
        env=QUICK_MLFLOW,
        timeout=180,
    )
    assert PASSWORD not in done.stdout + done.stderr
    if json_output:
        document = json.loads(done.stdout)  # MLflow's own lines do not break the JSON
        validate_doctor_json(document)
        tracker = next(c for c in document["checks"] if c["name"] == "tracker mlflow")
    else:
        tracker_rows = [row for row in done.stdout.splitlines() if "tracker mlflow" in row]
        assert tracker_rows
        tracker = {"status": tracker_rows[0].split()[0].lower()}
    assert tracker["status"] == "pass", done.stdout + done.stderr
