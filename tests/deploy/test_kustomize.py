"""deploy/kubernetes: every rendering (the base and each overlay) builds, validates against the Kubernetes schemas,
and keeps the security and wiring rules the deployment promises.

Renders with ``kubectl kustomize`` and validates each object with kubernetes-validate (strict: unknown fields are
errors) against the Kubernetes version in :data:`tests.deploy.support.KUBERNETES_VERSION`.
"""

from __future__ import annotations

import re
from types import ModuleType
from typing import Any

import pytest

from otel_bridge.prometheus.promql import parse_duration
from tests.deploy.support import (
    COLLECTOR_IMAGE,
    COLLECTOR_VERSION,
    IN_CLUSTER_PROMETHEUS_CONFIG,
    KUBERNETES_VERSION,
    NAMESPACES,
    OTELCOL_CONFIG,
    OTELCOL_MANIFEST,
    OVERLAYS,
    PROMETHEUS_IMAGE,
    RULES_DIR,
    container_of,
    env_references,
    load_yaml,
    objects_of_kind,
    one,
    pod_specs,
    render,
)

RENDERINGS = ("base", *OVERLAYS)
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
READ_VERBS = {"get", "list", "watch"}
#: What the collector may read, and why (deploy/kubernetes/base/collector/rbac.yaml): pods for kubernetes_sd and
#: k8s_attributes, replicasets for k8s_attributes' k8s.deployment.name.
COLLECTOR_RBAC = {("", "pods"), ("apps", "replicasets")}
COLLECTOR_LABELS = {"app.kubernetes.io/name": "otel-collector"}
PROMETHEUS_LABELS = {"app.kubernetes.io/name": "prometheus"}
TRAINER_LABELS = {"otel-bridge.io/trainer": "true"}
#: Headroom Prometheus needs on its volume beyond retention.size (WAL, head chunks and compaction are not counted in
#: it): retention.size must stay at or below this share of the volume.
RETENTION_SHARE_OF_VOLUME = 0.9
ENVIRONMENT = {"base": "default", "dev": "dev", "prod": "prod"}
PINNED_TAG = re.compile(r"^v?\d+\.\d+\.\d+$")
SECRETISH = re.compile(r"TOKEN|PASSWORD|PASSWD|SECRET|API_?KEY|CREDENTIAL", re.IGNORECASE)


def kubernetes_validate() -> ModuleType:
    try:
        import kubernetes_validate as module  # type: ignore[import-untyped]  # here, to fail with the fix
    except ImportError:
        pytest.fail(
            "kubernetes-validate is required by tests/deploy: pip install 'kubernetes-validate>=1.32.0' "
            "(it is in the dev extras: pip install -e '.[dev]')",
            pytrace=False,
        )
    versions = module.utils.all_versions()
    if KUBERNETES_VERSION not in versions:
        pytest.fail(
            f"this kubernetes-validate ({module.__version__}) has no schemas for Kubernetes {KUBERNETES_VERSION} "
            f"(it has {versions[0]}..{versions[-1]}): install one that ships them, or move KUBERNETES_VERSION in "
            "tests/deploy/support.py and deploy/README.md",
            pytrace=False,
        )
    checked: ModuleType = module
    return checked


def name_of(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


@pytest.mark.parametrize("rendering", RENDERINGS)
def test_renders_and_validates_against_kubernetes_schemas(rendering: str) -> None:
    validator = kubernetes_validate()
    objects = render(rendering)
    kinds = sorted({obj["kind"] for obj in objects})
    assert kinds == sorted(
        {
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "Deployment",
            "Namespace",
            "NetworkPolicy",
            "PersistentVolumeClaim",
            "Service",
            "ServiceAccount",
        }
    ), kinds
    errors = []
    for obj in objects:
        try:
            validator.validate(obj, KUBERNETES_VERSION, strict=True)
        except validator.ValidationError as exc:
            errors.append(f"{name_of(obj)}: {'/'.join(map(str, exc.absolute_path))}: {exc.message}")
        except validator.utils.SchemaNotFoundError as exc:
            errors.append(f"{name_of(obj)}: {exc.message}")
    assert not errors, f"objects invalid for Kubernetes {KUBERNETES_VERSION}:\n" + "\n".join(errors)


@pytest.mark.parametrize("rendering", RENDERINGS)
def test_every_container_is_pinned_limited_probed_and_unprivileged(rendering: str) -> None:
    problems: list[str] = []
    specs = list(pod_specs(render(rendering)))
    assert {where for where, _ in specs} == {"Deployment/otel-collector", "Deployment/prometheus"}
    for where, pod in specs:
        pod_security = pod.get("securityContext") or {}
        for flag in ("hostNetwork", "hostPID", "hostIPC"):
            if pod.get(flag):
                problems.append(f"{where}: {flag}")
        problems += [f"{where}: hostPath volume {v['name']}" for v in pod.get("volumes", []) if "hostPath" in v]
        for container in pod.get("initContainers", []) + pod["containers"]:
            at = f"{where} container {container['name']}"
            is_init = container in pod.get("initContainers", [])
            image = container["image"]
            repository, _, tag = image.rpartition(":")
            if "@" in image or not repository or "/" in tag or not PINNED_TAG.match(tag):
                problems.append(f"{at}: image {image!r} is not pinned to an explicit version tag")
            resources = container.get("resources") or {}
            for kind in ("requests", "limits"):
                missing = {"cpu", "memory"} - set(resources.get(kind) or {})
                if missing:
                    problems.append(f"{at}: no {kind} for {sorted(missing)}")
            if not is_init:
                problems += [
                    f"{at}: no {probe}" for probe in ("livenessProbe", "readinessProbe") if probe not in container
                ]
            security = container.get("securityContext") or {}
            if security.get("runAsNonRoot", pod_security.get("runAsNonRoot")) is not True:
                problems.append(f"{at}: runAsNonRoot is not true")
            if security.get("runAsUser", pod_security.get("runAsUser")) == 0:
                problems.append(f"{at}: runs as UID 0")
            if security.get("readOnlyRootFilesystem") is not True:
                problems.append(f"{at}: readOnlyRootFilesystem is not true")
            if security.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{at}: allowPrivilegeEscalation is not false")
            if security.get("privileged"):
                problems.append(f"{at}: privileged")
            if "ALL" not in (security.get("capabilities") or {}).get("drop", []):
                problems.append(f"{at}: capabilities.drop lacks ALL")
            if (security.get("capabilities") or {}).get("add"):
                problems.append(f"{at}: adds capabilities")
            seccomp = security.get("seccompProfile") or pod_security.get("seccompProfile") or {}
            if seccomp.get("type") != "RuntimeDefault":
                problems.append(f"{at}: seccompProfile is not RuntimeDefault")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("rendering", RENDERINGS)
def test_images_are_the_pinned_releases(rendering: str) -> None:
    objects = render(rendering)
    assert container_of(objects, "otel-collector")["image"] == COLLECTOR_IMAGE
    assert container_of(objects, "prometheus")["image"] == PROMETHEUS_IMAGE
    # The collector config and the manifest of its distribution target the release the Deployment runs.
    assert load_yaml(OTELCOL_MANIFEST)["dist"]["version"] == COLLECTOR_VERSION
    assert COLLECTOR_IMAGE in OTELCOL_CONFIG.read_text(encoding="utf-8").split("\n\n", 1)[0]


@pytest.mark.parametrize("rendering", RENDERINGS)
def test_rbac_is_read_only_and_minimal(rendering: str) -> None:
    objects = render(rendering)
    roles = objects_of_kind(objects, "ClusterRole") + objects_of_kind(objects, "Role")
    problems: list[str] = []
    for role in roles:
        for rule in role.get("rules", []):
            where = f"{name_of(role)} rule {rule}"
            if rule.get("nonResourceURLs"):
                problems.append(f"{where}: grants nonResourceURLs")
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                if "*" in rule.get(field, []):
                    problems.append(f"{where}: wildcard in {field}")
            if not set(rule.get("verbs", [])) <= READ_VERBS:
                problems.append(f"{where}: verbs beyond {sorted(READ_VERBS)}")
    assert not problems, "\n".join(problems)

    assert objects_of_kind(objects, "Role") == []
    assert objects_of_kind(objects, "RoleBinding") == []
    (role,) = objects_of_kind(objects, "ClusterRole")
    granted = {
        (group, resource) for rule in role["rules"] for group in rule["apiGroups"] for resource in rule["resources"]
    }
    assert granted == COLLECTOR_RBAC
    assert all(sorted(rule["verbs"]) == sorted(READ_VERBS) for rule in role["rules"])

    (binding,) = objects_of_kind(objects, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "otel-collector", "namespace": NAMESPACES[rendering]}
    ]
    collector_pod = one(objects, "Deployment", "otel-collector")["spec"]["template"]["spec"]
    prometheus_pod = one(objects, "Deployment", "prometheus")["spec"]["template"]["spec"]
    assert collector_pod["serviceAccountName"] == "otel-collector"
    assert prometheus_pod["serviceAccountName"] == "prometheus"
    # Prometheus has static targets only: no API access, no token in the pod.
    assert prometheus_pod["automountServiceAccountToken"] is False
    assert one(objects, "ServiceAccount", "prometheus")["automountServiceAccountToken"] is False


@pytest.mark.parametrize("rendering", RENDERINGS)
def test_no_secrets_inline(rendering: str) -> None:
    objects = render(rendering)
    assert objects_of_kind(objects, "Secret") == [], "secrets are referenced (secretKeyRef), never rendered"
    problems = []
    for where, pod in pod_specs(objects):
        for container in pod.get("initContainers", []) + pod["containers"]:
            for env in container.get("env", []):
                if SECRETISH.search(env["name"]) and "secretKeyRef" not in env.get("valueFrom", {}):
                    problems.append(f"{where}: env {env['name']} must come from a secretKeyRef")
            for arg in container.get("args", []) + container.get("command", []):
                if SECRETISH.search(arg.split("=", 1)[0]):
                    problems.append(f"{where}: secret-looking argument {arg!r}")
    assert not problems, "\n".join(problems)
    for config_map in objects_of_kind(objects, "ConfigMap"):
        for key, text in config_map["data"].items():
            for line in text.splitlines():
                if re.match(r"^\s*(password|bearer_token|api_key|token)\s*:\s*\S", line, re.IGNORECASE):
                    problems.append(f"{name_of(config_map)} {key}: inline secret {line.strip()!r}")
    assert not problems, "\n".join(problems)


def _selects(policy: dict[str, Any], labels: dict[str, str]) -> bool:
    selector = policy["spec"]["podSelector"]
    assert "matchExpressions" not in selector, "extend _selects for matchExpressions"
    return all(labels.get(key) == value for key, value in (selector.get("matchLabels") or {}).items())


def _ingress_peers(objects: list[dict[str, Any]], labels: dict[str, str]) -> dict[tuple[str, str], set[int]]:
    """Who may connect to pods with ``labels``: ``{(namespaceSelector, podSelector): ports}`` over all policies."""
    peers: dict[tuple[str, str], set[int]] = {}
    for policy in objects_of_kind(objects, "NetworkPolicy"):
        if not _selects(policy, labels):
            continue
        assert "Ingress" in policy["spec"]["policyTypes"], name_of(policy)
        for rule in policy["spec"].get("ingress", []):
            # A rule without `from` (or with an empty peer) admits every source: never allowed here.
            assert rule.get("from"), f"{name_of(policy)}: an ingress rule without `from` admits everyone"
            assert rule.get("ports"), f"{name_of(policy)}: an ingress rule without `ports` opens every port"
            ports = {port["port"] for port in rule["ports"]}
            for peer in rule["from"]:
                assert "ipBlock" not in peer, f"{name_of(policy)}: ipBlock peers are not expected"
                key = (repr(peer.get("namespaceSelector")), repr(peer.get("podSelector")))
                peers.setdefault(key, set()).update(ports)
    return peers


@pytest.mark.parametrize("rendering", RENDERINGS)
def test_network_policies_admit_only_collector_and_trainers(rendering: str) -> None:
    objects = render(rendering)
    deny = one(objects, "NetworkPolicy", "default-deny-ingress")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}

    collector_peer = (repr(None), repr({"matchLabels": COLLECTOR_LABELS}))
    prometheus_peer = (repr(None), repr({"matchLabels": PROMETHEUS_LABELS}))
    trainer_peer = (repr({}), repr({"matchLabels": TRAINER_LABELS}))
    assert _ingress_peers(objects, PROMETHEUS_LABELS) == {collector_peer: {9090}, trainer_peer: {9090}}
    assert _ingress_peers(objects, COLLECTOR_LABELS) == {trainer_peer: {4317, 4318}, prometheus_peer: {8888}}
    # The policies' labels are the pods' labels.
    for deployment, labels in (("otel-collector", COLLECTOR_LABELS), ("prometheus", PROMETHEUS_LABELS)):
        pod_labels = one(objects, "Deployment", deployment)["spec"]["template"]["metadata"]["labels"]
        assert labels.items() <= pod_labels.items()


@pytest.mark.parametrize("rendering", RENDERINGS)
def test_config_maps_are_the_repository_files(rendering: str) -> None:
    objects = render(rendering)
    collector_config = one(objects, "ConfigMap", "otel-collector-config")
    assert collector_config["data"] == {"otelcol.yaml": OTELCOL_CONFIG.read_text(encoding="utf-8")}
    rules = one(objects, "ConfigMap", "prometheus-rules")
    rule_files = sorted(p for p in RULES_DIR.glob("*.yml") if not p.name.endswith(".test.yml"))
    assert rules["data"] == {p.name: p.read_text(encoding="utf-8") for p in rule_files}
    prometheus_config = one(objects, "ConfigMap", "prometheus-config")
    assert prometheus_config["data"] == {"prometheus.yml": IN_CLUSTER_PROMETHEUS_CONFIG.read_text(encoding="utf-8")}

    # ... and the pods mount them where their command lines look.
    def mounts(deployment: str) -> dict[str, str]:
        pod = one(objects, "Deployment", deployment)["spec"]["template"]["spec"]
        by_volume = {v["name"]: v.get("configMap", {}).get("name") for v in pod["volumes"]}
        (container,) = pod["containers"]
        assert all(m.get("readOnly") for m in container["volumeMounts"] if by_volume.get(m["name"]))
        return {by_volume[m["name"]]: m["mountPath"] for m in container["volumeMounts"] if by_volume.get(m["name"])}

    collector_mounts = mounts("otel-collector")
    assert container_of(objects, "otel-collector")["args"] == [
        f"--config={collector_mounts[collector_config['metadata']['name']]}/otelcol.yaml"
    ]
    prometheus_mounts = mounts("prometheus")
    prometheus_args = container_of(objects, "prometheus")["args"]
    config_dir = prometheus_mounts[prometheus_config["metadata"]["name"]]
    assert f"--config.file={config_dir}/prometheus.yml" in prometheus_args
    rules_dir = prometheus_mounts[rules["metadata"]["name"]]
    assert load_yaml(IN_CLUSTER_PROMETHEUS_CONFIG)["rule_files"] == [f"{rules_dir}/*.yml"]


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {env["name"]: env.get("value", env.get("valueFrom")) for env in container.get("env", [])}


@pytest.mark.parametrize("rendering", RENDERINGS)
def test_collector_is_wired_to_prometheus_and_its_config(rendering: str) -> None:
    objects = render(rendering)
    container = container_of(objects, "otel-collector")
    env = _env(container)
    # Every ${env:NAME} of the collector config is set, else the collector refuses to start.
    referenced = env_references(load_yaml(OTELCOL_CONFIG))
    assert referenced <= set(env), f"collector env lacks {sorted(referenced - set(env))}"
    assert env["MY_POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["OTEL_BRIDGE_ENVIRONMENT"] == ENVIRONMENT[rendering]
    # Remote write goes to this namespace's Prometheus Service, on its port.
    service = one(objects, "Service", "prometheus")
    (port,) = service["spec"]["ports"]
    assert (
        env["PROMETHEUS_REMOTE_WRITE_ENDPOINT"] == f"http://{service['metadata']['name']}:{port['port']}/api/v1/write"
    )
    assert service["spec"]["selector"] == PROMETHEUS_LABELS

    # The ports the collector config listens on are the container's, the Service's and the probes'.
    config = load_yaml(OTELCOL_CONFIG)
    listen = {
        "otlp-grpc": config["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"],
        "otlp-http": config["receivers"]["otlp"]["protocols"]["http"]["endpoint"],
        "health": config["extensions"]["health_check"]["endpoint"],
    }
    listen_ports = {name: int(endpoint.rsplit(":", 1)[1]) for name, endpoint in listen.items()}
    readers = config["service"]["telemetry"]["metrics"]["readers"]
    listen_ports["metrics"] = readers[0]["pull"]["exporter"]["prometheus"]["port"]
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container_ports == listen_ports
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": config["extensions"]["health_check"]["path"], "port": "health"}
    collector_service = one(objects, "Service", "otel-collector")
    assert collector_service["spec"]["selector"] == COLLECTOR_LABELS
    assert {p["name"]: (p["port"], p["targetPort"]) for p in collector_service["spec"]["ports"]} == {
        name: (listen_ports[name], name) for name in ("otlp-grpc", "otlp-http", "metrics")
    }
    # The in-cluster Prometheus scrapes the collector's self-metrics through that Service.
    jobs = {job["job_name"]: job for job in load_yaml(IN_CLUSTER_PROMETHEUS_CONFIG)["scrape_configs"]}
    assert jobs["otel-collector"]["static_configs"] == [
        {"targets": [f"{collector_service['metadata']['name']}:{listen_ports['metrics']}"]}
    ]
    # One replica: every replica would scrape every target (see the Deployment's comment).
    assert one(objects, "Deployment", "otel-collector")["spec"]["replicas"] == 1


def _bytes(quantity: str) -> int:
    """Kubernetes (Gi) and Prometheus (GB, base 1024) sizes in bytes."""
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|KB|MB|GB|TB)", quantity)
    assert match, quantity
    count, unit = int(match.group(1)), str(match.group(2))
    power = {"K": 1, "M": 2, "G": 3, "T": 4}[unit[0]]
    size: int = count * 1024**power
    return size


def _storage(rendering: str) -> tuple[float, int, int]:
    """The rendering's Prometheus retention time (seconds), retention size and data volume (bytes), each set once."""
    objects = render(rendering)
    args = container_of(objects, "prometheus")["args"]
    times = [a.split("=", 1)[1] for a in args if a.startswith("--storage.tsdb.retention.time=")]
    sizes = [a.split("=", 1)[1] for a in args if a.startswith("--storage.tsdb.retention.size=")]
    # Prometheus takes the last of repeated flags: each must be set exactly once
    assert len(times) == 1, args
    assert len(sizes) == 1, args
    volume = one(objects, "PersistentVolumeClaim", "prometheus-data")["spec"]["resources"]["requests"]["storage"]
    return parse_duration(times[0]), _bytes(sizes[0]), _bytes(volume)


@pytest.mark.parametrize("rendering", RENDERINGS)
def test_prometheus_receives_remote_write_and_keeps_its_retention(rendering: str) -> None:
    objects = render(rendering)
    args = container_of(objects, "prometheus")["args"]
    assert "--web.enable-remote-write-receiver" in args
    assert "--storage.tsdb.path=/prometheus" in args
    retention_s, retention_bytes, volume_bytes = _storage(rendering)
    assert retention_s >= 86400, "less than a day of history would not outlive one training run"
    # the size limit, not a full disk, is what ends old data: leave Prometheus its headroom on the volume
    assert retention_bytes <= RETENTION_SHARE_OF_VOLUME * volume_bytes, (retention_bytes, volume_bytes)
    pvc = one(objects, "PersistentVolumeClaim", "prometheus-data")
    pod = one(objects, "Deployment", "prometheus")["spec"]["template"]["spec"]
    data = {v["name"]: v for v in pod["volumes"]}["data"]
    assert data["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]


def test_overlays_scale_storage_in_the_intended_direction() -> None:
    dev, base, prod = (_storage(rendering) for rendering in ("dev", "base", "prod"))
    for index, what in enumerate(("retention time", "retention size", "volume")):
        assert dev[index] < base[index] < prod[index], (what, dev, base, prod)


@pytest.mark.parametrize("rendering", RENDERINGS)
def test_objects_live_in_the_rendering_namespace(rendering: str) -> None:
    objects = render(rendering)
    namespace = NAMESPACES[rendering]
    (ns,) = objects_of_kind(objects, "Namespace")
    assert ns["metadata"]["name"] == namespace
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    for obj in objects:
        if obj["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in obj["metadata"], name_of(obj)
        else:
            assert obj["metadata"].get("namespace") == namespace, name_of(obj)
    # Cluster-scoped names must not collide between overlays applied to one cluster.
    cluster_names = {
        overlay: {name_of(o) for o in render(overlay) if o["kind"] in CLUSTER_SCOPED - {"Namespace"}}
        for overlay in OVERLAYS
    }
    assert not cluster_names["dev"] & cluster_names["prod"]
