"""A real vLLM server for integration tests: vLLM 0.32's CPU build (the ``vllm`` peer, ``make peer-vllm``) serving a
tiny random Llama generated here, on a free loopback port, stopped by its process group.

``vllm serve`` runs three processes (the API server, its engine core, the engine core's worker), all in the session
:class:`VLLMServer` starts, so :meth:`VLLMServer.stop` and :meth:`VLLMServer.kill` end them together. It is ready when
``/health`` answers 200 (the HTTP server starts once the engine is up): 47-177 s on 2 cores, so a module shares one
server and starts a second only for a restart. The flags keep it small on a CPU: a 256-token context, 8 sequences at
once, float32, eager mode (no torch.compile warm-up), a 1 GiB KV cache (``VLLM_CPU_KVCACHE_SPACE``), OpenMP threads
not bound to cores (the machine is shared), offline (no model hub: ``HF_HUB_OFFLINE``), no usage reports.

:func:`tiny_llama` writes the model once per machine (tests/helpers/tiny_llama.py, run by the peer's interpreter) into
the peers' cache, under a name that changes with the script.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from tests.helpers import reaper
from tests.helpers.peers import VLLM, peer_binary, peers_root
from tests.helpers.prometheus_server import ServerProcess

__all__ = ["MODEL_NAME", "VLLMServer", "tiny_llama", "vllm_python"]

#: The name the server serves the model under (``--served-model-name``; the ``model_name`` label of its metrics).
MODEL_NAME = "tiny"
#: Seconds a server may take to become ready (measured: 47-66 s on 2 cores, up to 177 s at load average 19).
START_TIMEOUT_S = 400.0
GENERATOR = Path(__file__).with_name("tiny_llama.py")


def vllm_python() -> Path:
    """The interpreter of the ``vllm`` peer's environment (fails the test, naming ``make peer-vllm``, when absent)."""
    return peer_binary(VLLM, "venv/bin/python")


def tiny_llama() -> Path:
    """The folder of the tiny random Llama (config, safetensors, tokenizer), written on first use on this machine."""
    digest = hashlib.sha256(GENERATOR.read_bytes()).hexdigest()[:12]
    folder = peers_root() / f"tiny-llama-{digest}"
    if (folder / "config.json").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        subprocess.run(
            [str(vllm_python()), str(GENERATOR), str(building)],
            check=True,
            capture_output=True,
            timeout=300,
            env=_offline_environment(),
        )
        try:
            building.rename(folder)
        except OSError:  # written meanwhile by another process
            if not (folder / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return folder


def _offline_environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the peer's own packages, not this checkout
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    return env


class VLLMServer(ServerProcess):
    """``vllm serve MODEL`` on 127.0.0.1 (``port``: a free one by default, or the port of a server it replaces)."""

    name = "vllm"

    def __init__(self, workdir: Path, model: Path, port: int | None = None) -> None:
        super().__init__(workdir, port, "/health")
        self.model = model
        self.hostport = f"127.0.0.1:{self.port}"
        self.started_s: float | None = None
        """Seconds from the process' start until it answered ``/health`` (set by :meth:`start`)."""

    def command(self) -> list[str]:
        return [
            str(vllm_python()),
            "-m",
            "vllm.entrypoints.cli.main",  # `vllm serve`: the venv's scripts name its build folder in their #! lines
            "serve",
            str(self.model),
            "--host=127.0.0.1",
            f"--port={self.port}",
            f"--served-model-name={MODEL_NAME}",
            "--max-model-len=256",
            "--max-num-seqs=8",
            "--dtype=float32",
            "--enforce-eager",
            "--disable-uvicorn-access-log",
        ]

    def environment(self) -> Mapping[str, str]:
        env = _offline_environment()
        env.update(
            VLLM_CPU_KVCACHE_SPACE="1",
            VLLM_CPU_OMP_THREADS_BIND="nobind",
            VLLM_CACHE_ROOT=str(self.workdir / "vllm-cache"),
        )
        return env

    def start(self, timeout_s: float = START_TIMEOUT_S) -> VLLMServer:
        began = time.monotonic()
        try:
            super().start(timeout_s)
        except BaseException:
            self.kill()  # its engine processes too, whatever the API server did
            raise
        self.started_s = time.monotonic() - began
        return self

    def stop(self) -> None:
        """End every process of the server's session: SIGTERM, then SIGKILL after 10 s."""
        self._signal_group(signal.SIGTERM, wait_s=10.0)
        self._signal_group(signal.SIGKILL, wait_s=10.0)
        if self.process is not None:
            reaper.unregister(self.process.pid)

    def kill(self) -> None:
        """End every process of the server's session at once (SIGKILL), as a crash does; returns once all are gone."""
        self._signal_group(signal.SIGKILL, wait_s=10.0)
        if self.process is not None:
            reaper.unregister(self.process.pid)

    def _signal_group(self, sig: signal.Signals, wait_s: float) -> None:
        if self.process is None:
            return
        group = self.process.pid  # start_new_session: the API server leads its own session and process group
        try:
            os.killpg(group, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            self.process.poll()  # reaps the leader; the others are reparented, and reaped by whoever adopts them
            if not _living_members(group):
                return
            time.sleep(0.05)


def _living_members(group: int) -> list[int]:
    """The processes of process group ``group`` that are not zombies (Linux ``/proc``)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()  # after "pid (comm)": state, ppid, pgrp, ...
        except OSError:  # exited meanwhile
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members
