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
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
                # Ray's processes report their metrics to the node's agent every 10 s by default
                # (ray_config_def.h); the tests reading them (the metrics-agent name forms) wait on that, not on
                # behaviour that depends on its length. Ray floors it at 1 s.
                _system_config={"metrics_report_interval_ms": 1000},
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


@contextmanager
def multi_node_cluster(nodes: int, temp_dir: Path, *, connect: bool = True) -> Iterator[Any]:
    """A Ray cluster of ``nodes`` nodes on this machine (``ray.cluster_utils.Cluster``: a head with one CPU, the others
    with none, 80 MB of object store each), this process connected to it as its driver (``connect=False``: the caller
    connects, ``ray.init(address=cluster.address)``); shut down on exit.

    One process holds one Ray: call this where Ray is not initialised yet (a child process when the session's
    :func:`ray_cluster` may be up). Its files, the address file Ray writes for ``address='auto'`` included, go under
    ``temp_dir`` (``RAY_TMPDIR``; short, Ray's Unix sockets live under it). Ray's health checks run every 0.5 s, so a
    node removed with ``cluster.remove_node`` is found dead in about 1.5 s instead of Ray's default ~15 s."""
    import ray
    from ray.cluster_utils import Cluster

    os.environ["RAY_TMPDIR"] = str(temp_dir)
    store = 80 * 1024 * 1024
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "include_dashboard": False,
            "object_store_memory": store,
            "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 3},
        },
    )
    try:
        for _ in range(nodes - 1):
            cluster.add_node(num_cpus=0, object_store_memory=store)
        cluster.wait_for_nodes()
        if connect:
            ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.WARNING)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
