"""Running the ``otel-bridge`` command line as a subprocess, and the documented ``doctor --json`` shape."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a CLI subprocess: this repo importable, no colour, no otel-bridge overrides."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_BRIDGE")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["NO_COLOR"] = "1"
    env.update(extra or {})
    return env


def stop_process(process: subprocess.Popen[bytes]) -> int:
    """Terminate ``process`` (by PID) if it still runs, kill it if it does not end within 15 s; its exit status."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)
    return process.returncode


def run_cli(
    args: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """``python -m otel_bridge.cli ARGS`` in ``cwd``; returns the finished process (stdout, stderr, returncode)."""
    return subprocess.run(
        [sys.executable, "-m", "otel_bridge.cli", *args],
        cwd=cwd,
        env=cli_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def write_config(path: Path, config: Mapping[str, Any]) -> Path:
    """Write ``config`` as YAML to ``path``."""
    path.write_text(yaml.safe_dump(dict(config)), encoding="utf-8")
    return path


STATUSES = ("pass", "fail", "warn", "skip")


def validate_doctor_json(document: Any) -> None:
    """Assert ``document`` has the shape docs/cli.md documents for ``otel-bridge doctor --json``."""
    assert isinstance(document, dict), document
    assert set(document) == {"ok", "config", "checks"}, sorted(document)
    assert isinstance(document["ok"], bool)
    assert document["config"] is None or isinstance(document["config"], str)
    assert isinstance(document["checks"], list)
    assert document["checks"]
    for check in document["checks"]:
        assert isinstance(check, dict), check
        assert set(check) == {"name", "status", "detail", "fix"}, check
        assert isinstance(check["name"], str)
        assert check["name"]
        assert check["status"] in STATUSES, check
        assert isinstance(check["detail"], str)
        assert check["fix"] is None or isinstance(check["fix"], str)
        if check["status"] == "fail":
            assert check["fix"], f"a failed check must say how to fix it: {check}"
    assert document["ok"] == all(c["status"] != "fail" for c in document["checks"])


def check_named(document: dict[str, Any], name: str) -> dict[str, Any]:
    """The check called ``name`` in a doctor document."""
    found = [c for c in document["checks"] if c["name"] == name]
    assert len(found) == 1, f"{name!r} not among {[c['name'] for c in document['checks']]}"
    return found[0]
