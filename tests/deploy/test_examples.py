"""deploy/kubernetes/examples/raycluster.yaml matches what the deployment expects of a RayCluster: the annotations the
collector's scrape jobs keep, the label the NetworkPolicies admit, and a trainer environment that otel-bridge reads
as pointing at the deployed Services.

The example is a KubeRay custom resource, for which kubernetes-validate has no schema; these checks stand in.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import pytest

from otel_bridge.config import BridgeConfig
from tests.deploy.support import EXAMPLE_RAYCLUSTER, NAMESPACES, OTELCOL_CONFIG, load_yaml, one, render

TRAINER_LABEL = ("otel-bridge.io/trainer", "true")


@pytest.fixture(scope="module")
def raycluster() -> dict[str, Any]:
    loaded: dict[str, Any] = load_yaml(EXAMPLE_RAYCLUSTER)
    return loaded


def templates(raycluster: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """``(group, rayStartParams, pod template)`` of the head and every worker group."""
    head = raycluster["spec"]["headGroupSpec"]
    groups = [("head", head["rayStartParams"], head["template"])]
    groups += [(g["groupName"], g["rayStartParams"], g["template"]) for g in raycluster["spec"]["workerGroupSpecs"]]
    return groups


def meta_label(annotation: str) -> str:
    """The Prometheus discovery label of a pod annotation."""
    return "__meta_kubernetes_pod_annotation_" + re.sub(r"[^a-zA-Z0-9_]", "_", annotation)


def test_is_a_kuberay_raycluster(raycluster: dict[str, Any]) -> None:
    assert raycluster["apiVersion"] == "ray.io/v1"
    assert raycluster["kind"] == "RayCluster"
    for group, _, template in templates(raycluster):
        for container in template["spec"]["containers"]:
            assert re.fullmatch(r"rayproject/ray:\d+\.\d+\.\d+-py3\d+", container["image"]), group
            assert {"requests", "limits"} <= set(container["resources"]), group


def test_annotations_are_the_ones_the_collector_scrapes(raycluster: dict[str, Any]) -> None:
    scrape = load_yaml(OTELCOL_CONFIG)["receivers"]["prometheus"]["config"]["scrape_configs"]
    sources = {label for job in scrape for rule in job.get("relabel_configs", []) for label in rule["source_labels"]}
    for group, params, template in templates(raycluster):
        annotations = template["metadata"]["annotations"]
        ports = {p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
        assert annotations["prometheus.io/scrape"] == "true", group
        # Ray's metrics agent listens where the annotation says.
        assert annotations["prometheus.io/port"] == params["metrics-export-port"], group
        for key, value in annotations.items():
            assert meta_label(key) in sources, f"{group}: the collector ignores annotation {key}"
            if key.endswith("/port"):
                assert int(value) in ports, f"{group}: {key}={value} is no container port"


def test_trainer_environment_points_at_the_deployed_services(raycluster: dict[str, Any]) -> None:
    objects = render("base")
    namespace = NAMESPACES["base"]
    head = raycluster["spec"]["headGroupSpec"]["template"]
    assert head["metadata"]["labels"][TRAINER_LABEL[0]] == TRAINER_LABEL[1]
    (container,) = head["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}

    def service_port(url: str) -> int:
        parts = urlsplit(url)
        assert parts.hostname is not None
        service, service_namespace = parts.hostname.split(".")[:2]
        assert service_namespace == namespace, url
        ports = [p["port"] for p in one(objects, "Service", service)["spec"]["ports"]]
        assert parts.port is not None, url
        assert parts.port in ports, f"{url}: Service {service} has ports {ports}"
        return parts.port

    assert service_port(env["OTEL_EXPORTER_OTLP_ENDPOINT"]) == 4317
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "grpc"
    assert service_port(env["OTEL_BRIDGE_PROMETHEUS_URL"]) == 9090

    # otel-bridge reads these variables as prometheus.url and prometheus.scrape_interval_s, and the interval is the
    # collector's (the bridge looks back 2x it for a window's baseline).
    config = BridgeConfig.load({"metrics": [{"preset": "vllm"}]}, environ=env)
    assert config.prometheus.url == env["OTEL_BRIDGE_PROMETHEUS_URL"]
    interval = load_yaml(OTELCOL_CONFIG)["receivers"]["prometheus"]["config"]["global"]["scrape_interval"]
    assert f"{config.prometheus.scrape_interval_s:g}s" == interval


def test_trainer_label_is_the_one_the_network_policies_admit(raycluster: dict[str, Any]) -> None:
    selectors = [
        peer["podSelector"]["matchLabels"]
        for policy in render("base")
        if policy["kind"] == "NetworkPolicy"
        for rule in policy["spec"].get("ingress", [])
        for peer in rule["from"]
        if "namespaceSelector" in peer
    ]
    assert selectors
    assert all(selector == dict([TRAINER_LABEL]) for selector in selectors)
