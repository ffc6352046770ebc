"""Shared pieces of the benchmark suites: configurations, servers, statistics, machine info, results files."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from tests.helpers.processes import SCRAPE_CHILD, children

RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parent.parent
CAPTURE = REPO / "tests" / "fixtures" / "vllm" / "metrics-after-requests.txt"


PACKAGES = ("otel-bridge", "opentelemetry-sdk", "opentelemetry-api", "requests", "prometheus-client", "matplotlib")


def summary(samples: Sequence[float]) -> dict[str, float]:
    """p50/p99/max/mean/count of ``samples`` (nearest-rank percentiles; empty input gives NaNs and count 0)."""
    if not samples:
        nan = float("nan")
        return {"count": 0, "p50": nan, "p99": nan, "max": nan, "mean": nan}
    ordered = sorted(samples)

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999999) - 1))]

    return {
        "count": len(ordered),
        "p50": rank(0.50),
        "p99": rank(0.99),
        "max": ordered[-1],
        "mean": sum(ordered) / len(ordered),
    }


def machine() -> dict[str, Any]:
    """Cores, CPU model, Python and the versions of the packages involved."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        cpu = platform.processor()
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    prometheus = None
    binary = os.environ.get("PROMETHEUS_BIN") or "prometheus"
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10, check=False)
        prometheus = (out.stdout or out.stderr).splitlines()[0] if (out.stdout or out.stderr) else None
    except OSError:
        prometheus = None
    return {
        "nproc": os.cpu_count(),
        "sched_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu": cpu,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "packages": versions,
        "prometheus": prometheus,
        "loadavg_1_5_15": list(os.getloadavg()),
    }


def write_result(name: str, payload: dict[str, Any]) -> Path:
    """Write ``bench/results/<name>.json`` (configuration, machine, raw samples, summaries)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"suite": name, "time": time.time(), "machine": machine(), **payload}
    path.write_text(json.dumps(payload, indent=1, default=float) + "\n", encoding="utf-8")
    return path


def rss_bytes() -> int:
    """Resident set size of this process (Linux ``/proc/self/statm``)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


@dataclass
class CaptureServers:
    """A child process serving the vLLM capture on ``len(ports)`` loopback ports (see :mod:`bench.capture_server`)."""

    process: subprocess.Popen[bytes]
    ports: list[int]
    body_bytes: int

    @property
    def targets(self) -> list[str]:
        """``127.0.0.1:<port>`` of every endpoint."""
        return [f"127.0.0.1:{p}" for p in self.ports]


@contextmanager
def stdin_bound_child(module: str, *args: str) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, Any]]]:
    """Start ``python -m module args...``, a server that prints one JSON line when listening and serves until its
    stdin closes; yields the process and that line; closes its stdin on exit (killed by PID after 10 s), even on
    errors."""
    process = subprocess.Popen(
        [sys.executable, "-m", module, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"{module} exited with {process.wait()} before listening")
        yield process, json.loads(line)
    finally:
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


@contextmanager
def capture_servers(count: int, capture: Path = CAPTURE) -> Iterator[CaptureServers]:
    """Start :mod:`bench.capture_server` with ``count`` ports; stop it (by PID) on exit, even on errors."""
    with stdin_bound_child("bench.capture_server", "--ports", str(count), "--capture", str(capture)) as (process, info):
        yield CaptureServers(process, info["ports"], info["bytes"])


def children_cpu_s(command_part: str = SCRAPE_CHILD) -> float:
    """CPU seconds (user + system) used so far by this process' running children whose command line contains
    ``command_part`` (``/proc``; 0 elsewhere)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in children(command_part):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited meanwhile
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


class CpuTimer:
    """Wall and process CPU time of a block (all threads of this process)."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0

    def __enter__(self) -> CpuTimer:
        self._w0, self._c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self._w0
        self.cpu = time.process_time() - self._c0


def thread_names() -> list[str]:
    """Names of the live threads (recorded to show what ran beside the measurement)."""
    return sorted(t.name for t in threading.enumerate())


@contextmanager
def simulated_vllm(count: int, rps: float = 10.0) -> Iterator[list[str]]:
    """``count`` simulated vLLM servers (``python -m otel_bridge.tools.simulation.vllm --workload``), each its own
    process.

    Yields their ``host:port``; terminates them by PID on exit.
    """
    processes: list[subprocess.Popen[str]] = []
    hostports: list[str] = []
    try:
        for index in range(count):
            process = subprocess.Popen(
                [sys.executable, "-m", "otel_bridge.tools.simulation.vllm", "--workload", "--seed", str(index), "--rps",
                 str(rps)],
                stdout=subprocess.PIPE,
                text=True,
                cwd=REPO,
            )  # fmt: skip
            processes.append(process)
            assert process.stdout is not None
            line = process.stdout.readline().strip()
            if not line.startswith("serving "):
                raise RuntimeError(f"simulated vLLM did not start: {line!r}")
            hostports.append(line.split("//", 1)[1].split("/", 1)[0])
        yield hostports
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)


class DelayProxy:
    """A real HTTP proxy on 127.0.0.1 in front of ``upstream``: adds ``delay_s`` to every request and counts them.

    Built on ``tests.helpers.http_servers.ScriptedHTTPServer`` (a threaded server: concurrent requests are delayed
    concurrently, as network latency is). ``count`` is the number of requests that reached it.
    """

    def __init__(self, upstream: str, delay_s: float) -> None:
        from tests.helpers.http_servers import Forward, RecordedRequest, Response, forwarding_proxy

        self.upstream = upstream
        self.delay_s = delay_s
        self._lock = threading.Lock()
        self.count = 0

        def delayed(request: RecordedRequest, forward: Forward) -> Response:
            with self._lock:
                self.count += 1
            answer = forward()
            answer.delay_s = delay_s
            return answer

        self._server = forwarding_proxy(upstream, delayed)
        self.url = self._server.url

    def close(self) -> None:
        """Stop the proxy (delayed answers in flight are released)."""
        self._server.close()

    def __enter__(self) -> DelayProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def prometheus_stack(workdir: Path, replicas: int = 2) -> Iterator[str]:
    """Simulated vLLM servers (seeded workload) and a real Prometheus scraping them every second; yields its URL."""
    from tests.helpers.prometheus_server import PrometheusServer

    with simulated_vllm(replicas) as targets:
        server = PrometheusServer(workdir / "prometheus", targets, scrape_interval_s=1.0)
        try:
            server.start()
            server.wait_for_samples("vllm:generation_tokens_total", count=3)
            yield server.url
        finally:
            server.stop()


def pyplot() -> Any:
    """matplotlib's pyplot with the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, name: str) -> Path:
    """Save ``fig`` as ``bench/results/<name>.png`` and close it."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path
