"""Running the ``otel-bridge`` command line as a subprocess, and the documented ``doctor --json`` shape."""

from __future__ import annotations

import atexit
import json
import locale
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.cli import cli_forks

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


class _CliForks:
    """A :mod:`tests.cli.cli_forks` server of this test process, having imported ``preload`` (its default: the CLI's):
    started at the first :func:`run_cli` (or :func:`run_python` with that ``preload``), ended (by its PID) when the
    process exits."""

    def __init__(self, preload: Sequence[str] = ()) -> None:
        self.env = cli_env()
        self._lock = threading.Lock()
        self._pending = b""
        self._server = subprocess.Popen(
            [sys.executable, "-m", "tests.cli.cli_forks", *preload],
            cwd=REPO,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
        )
        atexit.register(self.close)

    def serves(self, env: Mapping[str, str]) -> bool:
        """Whether a child of the server starts as a new interpreter with ``env`` would: the same start-up
        variables."""

        def startup(environ: Mapping[str, str]) -> dict[str, str]:
            return {k: v for k, v in environ.items() if k.startswith(cli_forks.STARTUP_PREFIXES)}

        return self._server.poll() is None and startup(env) == startup(self.env)

    def run(
        self, args: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float, code: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, *(["-m", "otel_bridge.cli"] if code is None else ["-c", code]), *args]
        deadline = time.monotonic() + timeout
        with self._lock, tempfile.TemporaryDirectory(prefix="otel-bridge-cli-") as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            request: dict[str, Any] = {
                "args": list(args),
                "cwd": str(cwd),
                "env": dict(env),
                "stdout": str(out),
                "stderr": str(err),
            }
            if code is not None:
                request["code"] = code
            assert self._server.stdin is not None
            self._server.stdin.write(json.dumps(request).encode() + b"\n")
            pid = self._answer(None)["pid"]
            try:
                status = self._answer(deadline)["status"]
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                self._answer(None)
                raise subprocess.TimeoutExpired(command, timeout, _text(out), _text(err)) from None
            return subprocess.CompletedProcess(command, status, _text(out), _text(err))

    def _answer(self, deadline: float | None) -> dict[str, int]:
        """The server's next line; :class:`TimeoutError` at ``deadline``."""
        assert self._server.stdout is not None
        fd = self._server.stdout.fileno()
        while b"\n" not in self._pending:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([fd], [], [], wait)[0]:
                raise TimeoutError
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"the CLI fork server (PID {self._server.pid}) ended: see stderr")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        answer: dict[str, int] = json.loads(line)
        return answer

    def close(self) -> None:
        stop_process(self._server)
        for pipe in (self._server.stdin, self._server.stdout):
            if pipe is not None:
                pipe.close()


def _text(path: Path) -> str:
    """A captured stream as ``subprocess.run(text=True)`` reads it: the locale's encoding, universal newlines."""
    data = path.read_bytes() if path.exists() else b""
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


_forks: dict[tuple[str, ...], _CliForks] = {}


def _server(preload: Sequence[str]) -> _CliForks:
    key = tuple(preload)
    if key not in _forks:
        _forks[key] = _CliForks(preload)
    return _forks[key]


def run_cli(
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 120.0,
    fresh: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``python -m otel_bridge.cli ARGS`` in ``cwd``; returns the finished process (stdout, stderr, returncode).

    The command runs in a process forked from a server that imported the CLI once (:mod:`tests.cli.cli_forks`: a
    second of CPU less a call), unless ``fresh`` (a test of the interpreter's start-up) or ``env`` changes what an
    interpreter reads at start-up (``PYTHONPATH``, the locale): then in a new ``python`` process."""
    return _run_python(None, args, cwd=cwd, env=env, preload=(), timeout=timeout, fresh=fresh)


def run_python(
    code: str,
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    preload: Sequence[str],
    timeout: float = 600.0,
    fresh: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``python -c CODE ARGS`` in ``cwd`` (the environment :func:`cli_env`'s), run as :func:`run_cli` runs the CLI: in a
    process forked from a server that imported ``preload`` once (the trackers a script writes to and reads back cost
    several seconds of imports a process), or in a new ``python`` process when ``env`` changes what an interpreter
    reads at start-up, or ``fresh``. A module in ``preload`` must not read the environment when imported (each script's
    environment is its own)."""
    return _run_python(code, args, cwd=cwd, env=env, preload=preload, timeout=timeout, fresh=fresh)


def _run_python(
    code: str | None,
    args: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str] | None,
    preload: Sequence[str],
    timeout: float,
    fresh: bool,
) -> subprocess.CompletedProcess[str]:
    """``python -c CODE ARGS`` (``code`` ``None``: ``python -m otel_bridge.cli ARGS``), forked or new (see
    :func:`run_python`)."""
    environment = cli_env(env)
    if not fresh:
        forks = _server(preload)
        if forks.serves(environment):
            return forks.run(args, cwd=cwd, env=environment, timeout=timeout, code=code)
    return subprocess.run(
        [sys.executable, *(["-m", "otel_bridge.cli"] if code is None else ["-c", code]), *args],
        cwd=cwd,
        env=environment,
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
