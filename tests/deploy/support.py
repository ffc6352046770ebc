"""Shared pieces of the deployment tests: paths, pinned versions, the external tools, rendering the overlays.

The tools (kubectl with its built-in kustomize, promtool) are required: a missing one fails the test with the way to
install it, it never skips.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.prometheus_server import prometheus_binary

REPO = Path(__file__).resolve().parents[2]
COLLECTOR_DIR = REPO / "collector"
OTELCOL_CONFIG = COLLECTOR_DIR / "otelcol.yaml"
OTELCOL_MANIFEST = COLLECTOR_DIR / "manifest.yaml"
PROMETHEUS_CONFIG = COLLECTOR_DIR / "prometheus.yml"
RULES_DIR = COLLECTOR_DIR / "rules"
KUBERNETES_DIR = REPO / "deploy" / "kubernetes"
BASE_DIR = KUBERNETES_DIR / "base"
OVERLAYS_DIR = KUBERNETES_DIR / "overlays"
EXAMPLE_RAYCLUSTER = KUBERNETES_DIR / "examples" / "raycluster.yaml"
IN_CLUSTER_PROMETHEUS_CONFIG = BASE_DIR / "prometheus" / "prometheus.yml"

#: The OpenTelemetry Collector contrib release that collector/otelcol.yaml and collector/manifest.yaml target (core
#: v0.165.0), and the contrib image the Kubernetes base runs.
COLLECTOR_VERSION = "0.165.1"
COLLECTOR_IMAGE = f"otel/opentelemetry-collector-contrib:{COLLECTOR_VERSION}"
#: Prometheus image deployed in the cluster: the release the suite runs every Prometheus test against.
PROMETHEUS_IMAGE = "prom/prometheus:v3.16.0"
#: Kubernetes version whose OpenAPI schemas (shipped by kubernetes-validate) the rendered objects must satisfy.
KUBERNETES_VERSION = "1.32.0"
#: The overlays that must render and validate (deploy/kubernetes/overlays/<name>).
OVERLAYS = ("dev", "prod")
#: The namespace each rendering puts the namespaced objects in.
NAMESPACES = {"base": "otel-bridge", "dev": "otel-bridge-dev", "prod": "otel-bridge"}

KUBECTL_FIX = (
    "install kubectl >= 1.27 (it bundles kustomize v5; `kubectl kustomize` renders the overlays), "
    "or point KUBECTL_BIN at one"
)
PROMTOOL_FIX = (
    "install the Debian package `prometheus` (it ships promtool; `make test` installs it when the prometheus "
    "binary is missing), or point PROMTOOL_BIN at one"
)
#: Realistic values for the environment variables collector/otelcol.yaml reads (as the Kubernetes base sets them).
COLLECTOR_ENV = {
    "MY_POD_IP": "10.42.0.17",
    "PROMETHEUS_REMOTE_WRITE_ENDPOINT": "http://prometheus:9090/api/v1/write",
    "OTEL_BRIDGE_ENVIRONMENT": "dev",
    "TRACES_OTLP_HTTP_ENDPOINT": "http://tempo:4318",
}


def require_tool(name: str, env_var: str, fix: str) -> str:
    """Path of the tool ``name`` (``$env_var`` first, then PATH); fails the calling test with ``fix`` when absent."""
    path = os.environ.get(env_var) or shutil.which(name)
    if not path:
        pytest.fail(f"`{name}` is required by the deployment tests and was not found: {fix}", pytrace=False)
    return path


def kubectl() -> str:
    return require_tool("kubectl", "KUBECTL_BIN", KUBECTL_FIX)


def promtool(version: str = "2.42") -> str:
    """promtool of Prometheus ``version``: Debian's (``$PROMTOOL_BIN`` or PATH) or the one built with 3.16."""
    if version == "2.42":
        return require_tool("promtool", "PROMTOOL_BIN", PROMTOOL_FIX)
    return prometheus_binary(version, "promtool")


def run_tool(command: Sequence[str], *, cwd: Path | None = None, timeout_s: float = 60.0) -> str:
    """Run a tool; fail the test with its full output when it exits non-zero. Returns stdout."""
    result = subprocess.run(list(command), capture_output=True, text=True, cwd=cwd, timeout=timeout_s, check=False)
    if result.returncode != 0:
        pytest.fail(
            f"`{' '.join(command)}` exited with {result.returncode}\n--- stdout\n{result.stdout}\n"
            f"--- stderr\n{result.stderr}",
            pytrace=False,
        )
    return result.stdout


def rendering_dir(name: str) -> Path:
    """``base`` or an overlay name -> its kustomization directory."""
    return BASE_DIR if name == "base" else OVERLAYS_DIR / name


@functools.cache
def _render_text(name: str) -> str:
    return run_tool([kubectl(), "kustomize", str(rendering_dir(name))])


def render(name: str) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize`` renders for ``base`` or an overlay (a fresh copy per call)."""
    return [doc for doc in yaml.safe_load_all(_render_text(name)) if doc]


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def string_values(node: Any) -> Iterator[str]:
    """Every string value (not key) in a parsed YAML/JSON tree, depth first."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from string_values(value)
    elif isinstance(node, list):
        for value in node:
            yield from string_values(value)


ENV_REFERENCE = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")


def env_references(config: Any) -> set[str]:
    """Names of the environment variables a collector config reads (``${env:NAME}`` in its values)."""
    return {name for value in string_values(config) for name in ENV_REFERENCE.findall(value)}


def objects_of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The single object of ``kind`` whose name is ``name`` (generated ConfigMaps: ``name-<hash>``)."""
    found = [
        obj
        for obj in objects_of_kind(objects, kind)
        if obj["metadata"]["name"] == name or obj["metadata"]["name"].startswith(f"{name}-")
    ]
    assert len(found) == 1, f"expected one {kind} named {name!r}, found {[o['metadata']['name'] for o in found]}"
    return found[0]


def pod_specs(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(kind/name, pod spec)`` of every workload that runs pods."""
    for obj in objects:
        spec = obj.get("spec") or {}
        if obj["kind"] == "Pod":
            yield f"Pod/{obj['metadata']['name']}", spec
        elif obj["kind"] in {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}:
            yield f"{obj['kind']}/{obj['metadata']['name']}", spec["template"]["spec"]
        elif obj["kind"] == "CronJob":
            yield f"CronJob/{obj['metadata']['name']}", spec["jobTemplate"]["spec"]["template"]["spec"]


def container_of(objects: list[dict[str, Any]], deployment: str) -> dict[str, Any]:
    """The single container of a Deployment."""
    containers = one(objects, "Deployment", deployment)["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, f"Deployment {deployment} should run one container"
    container: dict[str, Any] = containers[0]
    return container
