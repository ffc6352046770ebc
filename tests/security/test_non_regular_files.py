"""A config path, secret file or run record that is not a regular file is refused, naming it (issue 37 finding 9).

Before: a FIFO as the config path hung ``Bridge.from_config``, ``otel-bridge doctor --config`` and ``prometheus-rules
--config`` for ever (opening a FIFO waits for a writer); ``doctor`` hung on a run directory whose newest
``metrics.jsonl`` was a FIFO and died of MemoryError on one linked to ``/dev/zero``. Each call runs in a child
process with a deadline, so a regression fails the test instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli.support import check_named, cli_env, run_cli, validate_doctor_json, write_config
from tests.helpers.prometheus_server import PrometheusServer

FROM_CONFIG = textwrap.dedent(
    """
    import sys
    from otel_bridge import Bridge
    from otel_bridge.errors import ConfigError
    try:
        Bridge.from_config(sys.argv[1])
    except ConfigError as exc:
        print(f"ConfigError: {exc}")
    """
)

SECRET = textwrap.dedent(
    """
    import sys
    from otel_bridge import BridgeConfig
    from otel_bridge.errors import ConfigError
    config = BridgeConfig.model_validate(
        {"prometheus": {"url": "http://127.0.0.1:9", "auth": {"bearer_token_file": sys.argv[1]}}}
    )
    try:
        config.prometheus.auth.bearer_token()
    except ConfigError as exc:
        print(f"ConfigError: {exc}")
    """
)


def _python(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script, *args], env=cli_env(), capture_output=True, text=True, timeout=30, check=False
    )


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "otel-bridge.yaml"
    os.mkfifo(path)
    return path


def test_from_config_refuses_a_fifo_naming_it(fifo: Path) -> None:
    done = _python(FROM_CONFIG, str(fifo))
    assert done.stdout.startswith("ConfigError:"), done.stdout + done.stderr
    assert str(fifo) in done.stdout
    assert "FIFO" in done.stdout


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_from_config_refuses_a_device_and_a_link_to_it(tmp_path: Path, device: str) -> None:
    link = tmp_path / "config.yaml"
    link.symlink_to(device)
    for path in (device, str(link)):
        done = _python(FROM_CONFIG, path)
        assert done.stdout.startswith("ConfigError:"), done.stdout + done.stderr
        assert path in done.stdout
        assert "character device" in done.stdout


def test_a_directory_as_the_config_path_is_refused(tmp_path: Path) -> None:
    done = _python(FROM_CONFIG, str(tmp_path))
    assert done.stdout.startswith("ConfigError:"), done.stdout + done.stderr
    assert str(tmp_path) in done.stdout


def test_a_secret_file_that_is_a_fifo_is_refused(fifo: Path) -> None:
    done = _python(SECRET, str(fifo))
    assert done.stdout.startswith("ConfigError:"), done.stdout + done.stderr
    assert str(fifo) in done.stdout
    assert "FIFO" in done.stdout


@pytest.mark.parametrize("command", [["doctor", "--config"], ["prometheus-rules", "rules.yml", "--config"]])
def test_cli_commands_refuse_a_fifo_config(tmp_path: Path, fifo: Path, command: list[str]) -> None:
    done = run_cli([*command, str(fifo)], cwd=tmp_path, timeout=30)
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert str(fifo) in output, output
    assert "FIFO" in output, output
    assert "Traceback" not in output


@pytest.mark.integration
@pytest.mark.parametrize("prometheus_version", ["2.42"])  # the run directory is read the same for every store
@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_doctor_refuses_a_run_record_that_is_not_a_regular_file(
    tmp_path: Path, prometheus: PrometheusServer, kind: str, prometheus_version: str
) -> None:
    run = tmp_path / "runs" / "hostile"
    run.mkdir(parents=True)
    records = run / "metrics.jsonl"
    if kind == "fifo":
        os.mkfifo(records)
    else:
        records.symlink_to("/dev/zero")
    config = write_config(
        tmp_path / "otel-bridge.yaml",
        {
            "prometheus": {"url": prometheus.url, "scrape_interval_s": 1, "retries": 0},
            "metrics": [{"name": "vllm:num_requests_running"}],
            "trackers": [{"type": "jsonl"}],
            "run": {"dir": str(tmp_path / "runs"), "name": "hostile"},  # doctor judges this config's runs
        },
    )
    done = run_cli(["doctor", "--config", str(config), "--json"], cwd=tmp_path, timeout=60)
    document = json.loads(done.stdout)
    validate_doctor_json(document)
    boundaries = check_named(document, "step boundaries")
    assert boundaries["status"] == "warn", boundaries
    assert str(records) in boundaries["detail"]
    assert ("FIFO" if kind == "fifo" else "character device") in boundaries["detail"]
