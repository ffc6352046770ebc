"""Discovery against a real local Ray cluster (``tests.ray_fixtures.ray_cluster``, one per session).

Ray reports this machine's non-loopback address as its nodes' address. These tests compare what the discovery code
returns with ``ray.nodes()`` and with Ray's own service-discovery file; they never connect to that address.
"""

from __future__ import annotations

import json
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest

from otel_bridge.discovery import (
    SERVICE_DISCOVERY_FILE,
    TargetWatcher,
    find_service_discovery_file,
    ray_node_targets,
    ray_service_discovery_targets,
    resolve_prometheus_url,
    rollout_targets,
)
from otel_bridge.discovery.ray_cluster import HEAD_RESOURCE, format_hostport
from otel_bridge.errors import ConfigError, DiscoveryError

if TYPE_CHECKING:
    from tests.ray_fixtures import RayCluster


pytestmark = pytest.mark.integration


def _nodes() -> list[dict[str, Any]]:
    import ray

    return list(ray.nodes())


def test_resolver_returns_the_head_nodes_address_from_ray_nodes(ray_cluster: RayCluster) -> None:
    heads = [n for n in _nodes() if n["Alive"] and HEAD_RESOURCE in n["Resources"]]
    assert len(heads) == 1
    address = heads[0]["NodeManagerAddress"]

    got = resolve_prometheus_url("auto", environ={})
    assert got.url == f"http://{format_hostport(address, 9090)}"
    assert got.source == "ray head"
    assert len(got.tried) == 3  # config, OTEL_BRIDGE_PROMETHEUS_URL, RAY_PROMETHEUS_HOST: all unset

    assert resolve_prometheus_url(None, environ={}, ray_port=19090).url == f"http://{format_hostport(address, 19090)}"
    # earlier sources still win while Ray is up
    assert resolve_prometheus_url(None, environ={"RAY_PROMETHEUS_HOST": "http://p:1"}).url == "http://p:1"


def test_node_targets_are_the_alive_nodes_metrics_export_ports(ray_cluster: RayCluster) -> None:
    expected = sorted(format_hostport(n["NodeManagerAddress"], n["MetricsExportPort"]) for n in _nodes() if n["Alive"])
    assert ray_node_targets() == expected
    assert expected == [format_hostport(ray_cluster.head_address, ray_cluster.metrics_export_port)]


def test_service_discovery_file_of_the_running_session(ray_cluster: RayCluster) -> None:
    path = find_service_discovery_file(environ={})
    assert path == ray_cluster.session_dir / SERVICE_DISCOVERY_FILE  # found through the Ray API (session dir)
    # the stable path Ray keeps in the temp dir (what `ray start --temp-dir` users pass) leads to the same file
    via_temp_dir = find_service_discovery_file(temp_dir=ray_cluster.temp_dir, environ={}, use_ray_session=False)
    assert via_temp_dir == ray_cluster.temp_dir / SERVICE_DISCOVERY_FILE
    assert via_temp_dir.resolve() == path.resolve()

    content = json.loads(path.read_text(encoding="utf-8"))
    in_file = sorted({target for group in content for target in group["targets"]})
    assert ray_service_discovery_targets(environ={}) == in_file
    # every alive node's metrics agent is listed, under the address ray.nodes() reports
    assert set(ray_node_targets()) <= set(in_file)


def test_rollout_servers_registered_as_actor_handles(ray_cluster: RayCluster) -> None:
    import ray

    class RolloutServer:  # defined here so that Ray ships it by value to the worker
        def __init__(self, port: int) -> None:
            self.port = port

        def metrics_address(self) -> str:
            return f"127.0.0.1:{self.port}"

        def other(self) -> int:
            return self.port

    actor_cls = ray.remote(num_cpus=0)(RolloutServer)
    handles = [actor_cls.remote(8001), actor_cls.remote(8000)]
    try:
        assert rollout_targets(handles, timeout_s=60) == ["127.0.0.1:8000", "127.0.0.1:8001"]
        with pytest.raises(ConfigError, match="has no remote method 'nope'"):
            rollout_targets(handles, method="nope")
        with pytest.raises(DiscoveryError, match=r"answered other\(\) with int 8001: it must return a 'host:port'"):
            rollout_targets(handles, method="other", timeout_s=60)
    finally:
        for handle in handles:
            ray.kill(handle)


def test_watcher_over_ray_node_targets_reports_them_once(ray_cluster: RayCluster) -> None:
    seen: list[list[str]] = []
    reported = threading.Event()

    def on_change(targets: list[str]) -> None:
        seen.append(targets)
        reported.set()

    with TargetWatcher(ray_node_targets, on_change, interval_s=0.2, name="ray-nodes") as watcher:
        assert reported.wait(10)
        deadline = time.monotonic() + 10
        while watcher.resolutions < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watcher.resolutions >= 3
    assert seen == [ray_node_targets()]
    assert watcher.failures == 0
