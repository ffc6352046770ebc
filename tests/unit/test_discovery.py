"""The Prometheus URL resolver chain, Ray head selection (pure), and rollout-target registration."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from otel_bridge.config import ENV_PROMETHEUS_URL
from otel_bridge.discovery import (
    ENV_RAY_PROMETHEUS_HOST,
    Resolution,
    resolve_prometheus_url,
    rollout_targets,
    validate_target,
)
from otel_bridge.discovery.ray_cluster import HEAD_RESOURCE, node_metrics_targets, select_head_node
from otel_bridge.errors import ConfigError, DiscoveryError

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- resolver order (no Ray: use_ray=False)


def test_configured_url_wins_over_every_env_var() -> None:
    environ = {ENV_PROMETHEUS_URL: "http://env:9090", ENV_RAY_PROMETHEUS_HOST: "http://ray-env:9090"}
    got = resolve_prometheus_url("http://cfg:9090/", environ=environ, use_ray=False)
    assert got == Resolution("http://cfg:9090", "config", ())


def test_auto_and_none_go_on_to_our_env_var() -> None:
    environ = {ENV_PROMETHEUS_URL: "https://env:9443", ENV_RAY_PROMETHEUS_HOST: "http://ray-env:9090"}
    for configured in ("auto", "AUTO", None):
        got = resolve_prometheus_url(configured, environ=environ, use_ray=False)
        assert (got.url, got.source) == ("https://env:9443", f"env {ENV_PROMETHEUS_URL}")
        assert len(got.tried) == 1
        assert got.tried[0].startswith("config:")


def test_ray_prometheus_host_is_third() -> None:
    got = resolve_prometheus_url(None, environ={ENV_RAY_PROMETHEUS_HOST: "http://10.1.2.3:9091"}, use_ray=False)
    assert (got.url, got.source) == ("http://10.1.2.3:9091", f"env {ENV_RAY_PROMETHEUS_HOST}")
    assert [t.split(":")[0] for t in got.tried] == ["config", f"env {ENV_PROMETHEUS_URL}"]


def test_empty_env_values_count_as_not_set() -> None:
    environ = {ENV_PROMETHEUS_URL: "  ", ENV_RAY_PROMETHEUS_HOST: "http://ray-env:9090"}
    assert resolve_prometheus_url("auto", environ=environ, use_ray=False).source == f"env {ENV_RAY_PROMETHEUS_HOST}"


def test_each_step_is_logged_at_info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="otel_bridge.discovery")
    resolve_prometheus_url("auto", environ={ENV_RAY_PROMETHEUS_HOST: "http://h:9090"}, use_ray=False)
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("'auto'" in m for m in messages)
    assert any(ENV_PROMETHEUS_URL in m and "not set" in m for m in messages)
    assert any("http://h:9090" in m and ENV_RAY_PROMETHEUS_HOST in m for m in messages)


def test_nothing_found_lists_every_source_tried() -> None:
    with pytest.raises(DiscoveryError) as info:
        resolve_prometheus_url("auto", environ={}, use_ray=False)
    error = info.value
    assert [t.split(":")[0] for t in error.tried] == [
        "config",
        f"env {ENV_PROMETHEUS_URL}",
        f"env {ENV_RAY_PROMETHEUS_HOST}",
        "ray head",
    ]
    message = str(error)
    for source in ("config", ENV_PROMETHEUS_URL, ENV_RAY_PROMETHEUS_HOST, "ray head", "use_ray=False"):
        assert source in message
    assert "set prometheus.url" in message
    assert "localhost" not in message
    assert "127.0.0.1" not in message


@pytest.mark.parametrize(
    ("configured", "environ", "named"),
    [
        ("localhost:9090", {}, "prometheus.url"),
        ("ftp://h:9090", {}, "prometheus.url"),
        (None, {ENV_PROMETHEUS_URL: "not a url"}, ENV_PROMETHEUS_URL),
        (None, {ENV_RAY_PROMETHEUS_HOST: "10.0.0.1:9090"}, ENV_RAY_PROMETHEUS_HOST),
    ],
)
def test_a_set_but_malformed_source_is_a_config_error_naming_it(
    configured: str | None, environ: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError, match=f"{named}.*is not an http:// or https:// URL: set it to e.g. http://"):
        resolve_prometheus_url(configured, environ=environ, use_ray=False)


def test_bad_ray_port_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="ray_port = 0 is not a TCP port"):
        resolve_prometheus_url("auto", environ={}, ray_port=0)


def test_ray_not_initialised_is_a_discovery_error_listing_every_source() -> None:
    """In a fresh interpreter (deterministic whatever the session's Ray fixture did): Ray installed, not initialised."""
    pytest.importorskip("ray", reason="needs ray[default]")
    code = (
        "import json\n"
        "from otel_bridge.discovery import resolve_prometheus_url\n"
        "from otel_bridge.errors import DiscoveryError\n"
        "import ray\n"
        "try:\n"
        "    resolve_prometheus_url('auto', environ={})\n"
        "except DiscoveryError as exc:\n"
        "    print(json.dumps({'tried': exc.tried, 'message': str(exc), 'init': ray.is_initialized()}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in (ENV_PROMETHEUS_URL, ENV_RAY_PROMETHEUS_HOST)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=True
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["init"] is False  # the resolver never starts or joins a cluster itself
    assert len(result["tried"]) == 4
    assert result["tried"][3].startswith("ray head: Ray is not initialised in this process: call ray.init()")
    assert "tried, in order:" in result["message"]


# ---------------------------------------------------------------- head selection (pure, fake ray.nodes())


def _node(node_id: str, address: str, *, alive: bool = True, head: bool = False, port: int = 8080) -> dict[str, Any]:
    resources = {"CPU": 1.0, f"node:{address}": 1.0}
    if head:
        resources[HEAD_RESOURCE] = 1.0
    return {
        "NodeID": node_id,
        "Alive": alive,
        "alive": alive,
        "NodeManagerAddress": address,
        "MetricsExportPort": port,
        "Resources": resources,
    }


def test_head_is_the_alive_node_with_the_head_resource() -> None:
    nodes = [
        _node("w1", "10.0.0.2"),
        _node("dead-head", "10.0.0.9", alive=False, head=True),
        _node("h", "10.0.0.1", head=True),
    ]
    assert select_head_node(nodes)["NodeID"] == "h"


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        ([], "lists 0 node(s) and none is alive"),
        ([_node("h", "10.0.0.1", alive=False, head=True)], "none is alive"),
        (
            [_node("w1", "10.0.0.2"), _node("w2", "10.0.0.3")],
            f"none of the 2 alive Ray node(s) holds resource '{HEAD_RESOURCE}'",
        ),
        ([_node("h1", "10.0.0.1", head=True), _node("h2", "10.0.0.2", head=True)], "2 alive Ray nodes hold resource"),
    ],
)
def test_no_head_or_several_heads_is_an_error_never_a_guess(nodes: list[dict[str, Any]], expected: str) -> None:
    with pytest.raises(DiscoveryError) as info:
        select_head_node(nodes)
    assert expected in str(info.value)
    assert "configure the Prometheus URL explicitly" in str(info.value) or "start the Ray cluster" in str(info.value)


def test_several_heads_are_all_named() -> None:
    with pytest.raises(DiscoveryError, match=r"h1 at 10\.0\.0\.1, h2 at 10\.0\.0\.2"):
        select_head_node([_node("h1", "10.0.0.1", head=True), _node("h2", "10.0.0.2", head=True)])


def test_node_metrics_targets_skip_dead_nodes_and_warn_about_missing_ports(caplog: pytest.LogCaptureFixture) -> None:
    nodes = [
        _node("h", "10.0.0.1", head=True, port=8080),
        _node("w", "fe80::1", port=8081),
        _node("dead", "10.0.0.3", alive=False, port=8082),
        _node("noport", "10.0.0.4", port=0),
    ]
    assert node_metrics_targets(nodes) == ["10.0.0.1:8080", "[fe80::1]:8081"]
    assert "noport" in caplog.text
    assert "not scraped" in caplog.text
    with pytest.raises(DiscoveryError, match="reports a MetricsExportPort"):
        node_metrics_targets([_node("noport", "10.0.0.4", port=0)])


# ---------------------------------------------------------------- rollout targets


def test_rollout_targets_from_a_list_are_validated_sorted_and_deduplicated() -> None:
    got = rollout_targets(["b.example:8001", "a.example:8000", "b.example:8001", " [::1]:9 "])
    assert got == ["[::1]:9", "a.example:8000", "b.example:8001"]


def test_rollout_targets_from_a_callable_are_asked_each_time() -> None:
    calls: list[int] = []

    def servers() -> list[str]:
        calls.append(1)
        return [f"10.0.0.{len(calls)}:8000"]

    assert rollout_targets(servers) == ["10.0.0.1:8000"]
    assert rollout_targets(servers) == ["10.0.0.2:8000"]


@pytest.mark.parametrize(
    ("servers", "match"),
    [
        ("10.0.0.1:8000", "not one string"),
        (["http://10.0.0.1:8000/metrics"], "drop the scheme and path"),
        (["10.0.0.1"], "is not 'host:port'"),
        (["10.0.0.1:70000"], "port in 1..65535"),
        (["10.0.0.1:8000", object()], "mix 'host:port' strings and other objects"),
        (lambda: "10.0.0.1:8000", "returned one string"),
        (lambda: [8000], "must be a 'host:port' string, got int"),
    ],
)
def test_rollout_targets_reject_malformed_registrations(servers: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        rollout_targets(servers)


def test_validate_target_accepts_hostnames_ipv4_and_bracketed_ipv6() -> None:
    for ok in ("vllm-0.svc.cluster.local:8000", "10.0.0.1:1", "[2001:db8::1]:65535", "h:80"):
        assert validate_target(ok) == ok
    for bad in ("2001:db8::1:80", ":80", "h:", "-h:80", "h :80"):
        with pytest.raises(ConfigError):
            validate_target(bad)
