"""A real local Ray cluster for the whole test session (one ``ray.init``, shut down at the end).

Register this module as a plugin once (in the root ``tests/conftest.py``, or in each test module that needs it),
so that every module shares the one session fixture; importing the fixture function into several modules would
define it once per module and start Ray several times::

    pytest_plugins = ["tests.ray_fixtures"]

    def test_something(ray_cluster: RayCluster) -> None: ...

The cluster is started with the dashboard (``include_dashboard=True``): Ray's dashboard process writes the Prometheus
service-discovery file, and the per-node agent exposes the metrics export port. Everything is kept private to the
session: its own temp dir (short, because Ray puts Unix sockets under it), a free dashboard port on 127.0.0.1, and free
ports for the autoscaler's and dashboard's metrics (Ray's defaults, 44217 and 44227, are fixed and would collide with
another Ray on the machine).

Ray reports this machine's non-loopback address as its nodes' ``NodeManagerAddress``. Tests compare addresses with
``ray.nodes()`` but send traffic to 127.0.0.1 only: Ray's metrics agent listens on all interfaces, so its
``MetricsExportPort`` answers on loopback.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.http_servers import free_port

_log = logging.getLogger(__name__)

SD_FILE = "prom_metrics_service_discovery.json"


@dataclass(frozen=True)
class RayCluster:
    """What the session's Ray cluster reports about itself (read once, after start-up)."""

    temp_dir: Path
    session_dir: Path
    head: dict[str, Any]
    startup_s: float

    @property
    def head_address(self) -> str:
        """The head node's ``NodeManagerAddress`` (non-loopback: compare with it, never connect to it)."""
        return str(self.head["NodeManagerAddress"])

    @property
    def metrics_export_port(self) -> int:
        """The head node's metrics agent port (listening on all interfaces, so reachable at 127.0.0.1)."""
        return int(self.head["MetricsExportPort"])

    @property
    def sd_file(self) -> Path:
        """Ray's service-discovery file in the session directory."""
        return self.session_dir / SD_FILE


def _wait_for(predicate: Any, what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise RuntimeError(f"Ray test cluster: {what} not ready after {timeout_s}s")


def _sd_lists(path: Path, target: str) -> bool:
    try:
        groups = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return any(target in group.get("targets", []) for group in groups)


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    """A one-CPU local Ray cluster with the dashboard, private temp dir and ports; shut down at session end."""
    ray = pytest.importorskip("ray", reason="needs ray[default]: the ray extra")
    if ray.is_initialized():
        raise RuntimeError("Ray is already initialised in the test process; the session fixture must start it")
    temp_dir = Path(tempfile.mkdtemp(prefix="otb-ray-", dir="/tmp"))  # short: Unix socket paths live under it
    ports = {"AUTOSCALER_METRIC_PORT": str(free_port()), "DASHBOARD_METRIC_PORT": str(free_port())}
    started = time.monotonic()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in ports.items():
            patch.setenv(name, value)  # inherited by the Ray processes started below
        try:
            ray.init(
                num_cpus=1,
                include_dashboard=True,
                dashboard_host="127.0.0.1",
                dashboard_port=free_port(),
                log_to_driver=False,
                logging_level=logging.WARNING,
                _temp_dir=str(temp_dir),
            )
            node = ray._private.worker.global_worker.node
            session_dir = Path(node.get_session_dir_path())
            heads = [n for n in ray.nodes() if n.get("Alive") and "node:__internal_head__" in n.get("Resources", {})]
            if len(heads) != 1:
                raise RuntimeError(f"Ray test cluster: expected one alive head node, ray.nodes() says {heads}")
            # The dashboard rewrites the file every 5 s; its first version predates the node's metrics agent.
            wanted = f"{heads[0]['NodeManagerAddress']}:{heads[0]['MetricsExportPort']}"
            _wait_for(lambda: _sd_lists(session_dir / SD_FILE, wanted), f"service-discovery file listing {wanted}", 30)
            cluster = RayCluster(
                temp_dir=Path(node.get_temp_dir_path()),
                session_dir=session_dir,
                head=dict(heads[0]),
                startup_s=time.monotonic() - started,
            )
            _log.info("Ray test cluster up in %.1fs: head %s", cluster.startup_s, cluster.head_address)
            yield cluster
        finally:
            ray.shutdown()
            shutil.rmtree(temp_dir, onerror=lambda _f, p, e: _log.warning("cannot remove %s: %s", p, e[1]))
