"""The OpenTelemetry Collector distribution of collector/manifest.yaml (``make peer-otelcol``), run for real.

:class:`CollectorProcess` starts it with a given config (a dict, written to ``workdir/otelcol.yaml``) and environment,
waits for its ``health_check`` extension, stops it by PID (SIGTERM: it flushes its queues, then exits) even when the
test fails, and reads its log: :meth:`CollectorProcess.log_problems` lists every entry above ``info`` (warnings,
errors; a deprecated alias or field warns at start-up). :func:`validate` runs ``otelcol validate``.

:func:`runnable` removes from a config the components this build lacks (:data:`tests.helpers.peers.
UNAVAILABLE_COMPONENTS`) and nothing else.
"""

from __future__ import annotations

import copy
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.helpers.peers import OTELCOL, UNAVAILABLE_COMPONENTS, peer_binary
from tests.helpers.prometheus_server import ServerProcess

__all__ = ["CollectorProcess", "log_entries", "otelcol_binary", "runnable", "validate"]

#: A log entry's first line in the collector's console encoding: time, tab, level, tab, caller, tab, message.
ENTRY = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z\t(?P<level>[a-z]+)\t")
QUIET_LEVELS = {"debug", "info"}


def otelcol_binary() -> str:
    """Path of the built distribution; fails the calling test with the make target when it is not built."""
    return str(peer_binary(OTELCOL, "otelcol-otel-bridge"))


def runnable(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` without the components the built distribution lacks, in their sections and in every pipeline."""
    out: dict[str, Any] = copy.deepcopy(dict(config))
    for kind, names in UNAVAILABLE_COMPONENTS.items():
        section = out.get(kind) or {}
        for name in names:
            for component_id in [c for c in section if c == name or c.startswith(f"{name}/")]:
                del section[component_id]
                for pipeline in out["service"]["pipelines"].values():
                    pipeline[kind] = [c for c in pipeline.get(kind, []) if c != component_id]
    return out


def validate(config_path: Path, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """``otelcol-otel-bridge validate --config=<path>`` with ``env`` as its whole environment."""
    return subprocess.run(
        [otelcol_binary(), "validate", f"--config={config_path}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=dict(env),
    )


def log_entries(text: str) -> list[tuple[str, str]]:
    """``(level, entry)`` for every entry of a collector log; continuation lines (stack traces) join their entry, and
    a line that is no entry's start before any entry counts as an ``unknown`` one."""
    entries: list[tuple[str, str]] = []
    for line in text.splitlines():
        match = ENTRY.match(line)
        if match:
            entries.append((match.group("level"), line))
        elif entries:
            level, entry = entries[-1]
            entries[-1] = (level, f"{entry}\n{line}")
        elif line.strip():
            entries.append(("unknown", line))
    return entries


class CollectorProcess(ServerProcess):
    """The collector with ``config`` and ``env``; ready when its health_check extension (``health_port``, path ``/``)
    answers 200."""

    name = "otelcol"

    def __init__(self, workdir: Path, config: Mapping[str, Any], env: Mapping[str, str], health_port: int) -> None:
        super().__init__(workdir, health_port, "/")
        self.config = config
        self.env = dict(env)
        self.config_path = workdir / "otelcol.yaml"

    def command(self) -> list[str]:
        return [otelcol_binary(), f"--config={self.config_path}"]

    def prepare(self) -> None:
        self.config_path.write_text(yaml.safe_dump(dict(self.config), sort_keys=False), encoding="utf-8")

    def environment(self) -> Mapping[str, str]:
        return self.env

    def log_problems(self) -> list[str]:
        """Every log entry above info (with its stack trace, if any)."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return [entry for level, entry in log_entries(text) if level not in QUIET_LEVELS]
