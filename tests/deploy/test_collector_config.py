"""collector/otelcol.yaml read as a file: well-formed pipelines wired as the bridge expects, environment references,
and an embedded Prometheus scrape config that promtool accepts (Debian's 2.42 and the 3.16 built from its module).

Whether the v0.165 collector takes every component and field is checked by the collector itself
(tests/deploy/test_collector_validate.py: ``otelcol validate``) and by running it (test_collector_e2e.py).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.support import (
    OTELCOL_CONFIG,
    env_references,
    load_yaml,
    promtool,
    string_values,
)
from tests.helpers.prometheus_server import PROMETHEUS_VERSIONS

KINDS = ("receivers", "processors", "exporters", "extensions", "connectors")
PIPELINE_ID = re.compile(r"^(metrics|traces|logs)(/[A-Za-z0-9_.\-]+)?$")
COMPONENT_ID = re.compile(r"^([a-z][a-z0-9_]*)(/[^/\s]+)?$")


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    loaded: dict[str, Any] = load_yaml(OTELCOL_CONFIG)
    return loaded


def component_type(component_id: str) -> str:
    match = COMPONENT_ID.match(component_id)
    assert match, f"{component_id!r} is not a component id (type or type/name)"
    return match.group(1)


def test_top_level_sections(config: dict[str, Any]) -> None:
    assert set(config) <= {*KINDS, "service"}, set(config) - {*KINDS, "service"}
    assert "service" in config


def test_service_section(config: dict[str, Any]) -> None:
    service = config["service"]
    assert set(service) <= {"extensions", "pipelines", "telemetry"}, set(service)
    defined = {kind: set(config.get(kind) or {}) for kind in KINDS}
    assert set(service.get("extensions", [])) == defined["extensions"], "every extension defined and enabled"
    used: dict[str, set[str]] = {kind: set() for kind in ("receivers", "processors", "exporters")}
    for pipeline_id, pipeline in service["pipelines"].items():
        assert PIPELINE_ID.match(pipeline_id), f"pipeline id {pipeline_id!r}"
        assert set(pipeline) <= {"receivers", "processors", "exporters"}, pipeline_id
        assert pipeline.get("receivers"), f"{pipeline_id} needs receivers"
        assert pipeline.get("exporters"), f"{pipeline_id} needs exporters"
        for kind in ("receivers", "processors", "exporters"):
            ids = pipeline.get(kind, [])
            assert len(ids) == len(set(ids)), f"{pipeline_id}.{kind} lists a component twice"
            for component_id in ids:
                in_connectors = kind != "processors" and component_id in defined["connectors"]
                assert component_id in defined[kind] or in_connectors, f"{pipeline_id}.{kind}: {component_id} undefined"
            used[kind].update(ids)
        processors = [component_type(p) for p in pipeline.get("processors", [])]
        if processors:
            assert processors[0] == "memory_limiter", f"{pipeline_id}: memory_limiter must come first"
            assert processors[-1] == "batch", f"{pipeline_id}: batch must come last"
    for kind, ids in used.items():
        assert defined[kind] <= ids, f"{kind} defined but in no pipeline: {sorted(defined[kind] - ids)}"


def test_metrics_pipeline_joins_trainers_and_infrastructure(config: dict[str, Any]) -> None:
    pipeline = config["service"]["pipelines"]["metrics"]
    assert pipeline["receivers"] == ["otlp", "prometheus"]
    assert pipeline["processors"] == ["memory_limiter", "resource", "k8s_attributes", "batch"]
    assert pipeline["exporters"] == ["prometheus_remote_write", "debug"]
    otlp = config["receivers"]["otlp"]["protocols"]
    assert otlp["grpc"]["endpoint"].endswith(":4317")
    assert otlp["http"]["endpoint"].endswith(":4318")
    remote_write = config["exporters"]["prometheus_remote_write"]
    assert remote_write["http"]["endpoint"] == "${env:PROMETHEUS_REMOTE_WRITE_ENDPOINT}"
    # The naming the bridge's metrics[].otlp entries expect by default (otel_bridge.prometheus_names), and series
    # whose identity does not change with the collector's version (no otel_scope_* labels).
    assert remote_write["translation_strategy"] == "UnderscoreEscapingWithSuffixes"
    assert remote_write["disable_scope_info"] is True
    assert "add_metric_suffixes" not in remote_write, "deprecated: translation_strategy says it"
    assert "resource_to_telemetry_conversion" not in remote_write, "deprecated: resource_constant_labels says it"
    # Self-telemetry on: the collector's own metrics are served for Prometheus.
    metrics = config["service"]["telemetry"]["metrics"]
    assert metrics["level"] in {"basic", "normal", "detailed"}
    assert metrics["readers"][0]["pull"]["exporter"]["prometheus"]["port"] == 8888
    # Profiling is reachable through port-forward only.
    assert config["extensions"]["pprof"]["endpoint"].startswith("localhost:")


def test_traces_pipeline_forwards_step_traces_to_a_trace_store(config: dict[str, Any]) -> None:
    """The bridge's step traces (OTLP in) go, batched, to a trace store over OTLP/HTTP whose URL comes from the
    environment."""
    pipeline = config["service"]["pipelines"]["traces"]
    assert pipeline["receivers"] == ["otlp"]
    assert pipeline["processors"][0] == "memory_limiter"
    assert pipeline["processors"][-1] == "batch"
    assert "otlp_http/traces" in pipeline["exporters"]
    exporter = config["exporters"]["otlp_http/traces"]
    assert exporter["endpoint"] == "${env:TRACES_OTLP_HTTP_ENDPOINT}"


def test_dollar_signs_are_escaped_or_env_references(config: dict[str, Any]) -> None:
    """The collector expands ``${env:NAME}`` and turns ``$$`` into ``$``; any other ``$`` is a mistake (a Prometheus
    relabel ``$1`` must be written ``$$1``)."""
    assert env_references(config) == {
        "MY_POD_IP",
        "PROMETHEUS_REMOTE_WRITE_ENDPOINT",
        "OTEL_BRIDGE_ENVIRONMENT",
        "TRACES_OTLP_HTTP_ENDPOINT",
    }
    bad = [
        value for value in string_values(config) if "$" in re.sub(r"\$\$|\$\{env:[A-Za-z_][A-Za-z0-9_]*\}", "", value)
    ]
    assert not bad, f"unescaped `$` (write `$$` for a literal one): {bad}"


def unescape_collector(node: Any) -> Any:
    """What the collector hands to the component: ``$$`` -> ``$`` in every string."""
    if isinstance(node, str):
        return node.replace("$$", "$")
    if isinstance(node, dict):
        return {key: unescape_collector(value) for key, value in node.items()}
    if isinstance(node, list):
        return [unescape_collector(value) for value in node]
    return node


#: kubernetes_sd_configs fields of Prometheus (the receiver embeds Prometheus' own config parser), without the HTTP
#: client settings this config does not use.
KUBERNETES_SD_FIELDS = {"role", "namespaces", "selectors", "attach_metadata", "api_server", "kubeconfig_file"}
KUBERNETES_SD_ROLES = {"pod", "node", "service", "endpoints", "endpointslice", "ingress"}
#: Prometheus 3's scrape protocols (the receiver embeds Prometheus 3; Debian's promtool 2.42 predates the field).
SCRAPE_PROTOCOLS = {
    "PrometheusProto",
    "OpenMetricsText0.0.1",
    "OpenMetricsText1.0.0",
    "PrometheusText0.0.4",
    "PrometheusText1.0.0",
}


def without_scrape_protocols(prometheus_config: dict[str, Any]) -> dict[str, Any]:
    """The config without ``global.scrape_protocols``, after checking its values, for a promtool that lacks it."""
    global_section = dict(prometheus_config.get("global", {}))
    protocols = global_section.pop("scrape_protocols", [])
    assert set(protocols) <= SCRAPE_PROTOCOLS, f"unknown scrape_protocols {set(protocols) - SCRAPE_PROTOCOLS}"
    return {**prometheus_config, "global": global_section}


def without_kubernetes_sd(prometheus_config: dict[str, Any]) -> dict[str, Any]:
    """The config with each kubernetes_sd_configs replaced by an empty static target list (same relabeling)."""
    jobs = []
    for job in prometheus_config["scrape_configs"]:
        job = dict(job)
        for sd in job.pop("kubernetes_sd_configs", []):
            unknown = set(sd) - KUBERNETES_SD_FIELDS
            assert not unknown, f"{job['job_name']}: unknown kubernetes_sd_configs fields {unknown}"
            assert sd["role"] in KUBERNETES_SD_ROLES, f"{job['job_name']}: role {sd['role']!r}"
            assert set(sd.get("namespaces", {})) <= {"names", "own_namespace"}, job["job_name"]
            job.setdefault("static_configs", []).append({"targets": []})
        jobs.append(job)
    return {**prometheus_config, "scrape_configs": jobs}


@pytest.mark.parametrize("version", PROMETHEUS_VERSIONS)
def test_embedded_prometheus_config_passes_promtool(config: dict[str, Any], tmp_path: Path, version: str) -> None:
    """The receiver's `config` is a Prometheus config: promtool must accept it once `$$` is unescaped.

    Debian's promtool is built without Kubernetes service discovery, and so is the 3.16 one built here (its
    remove_all_sd tag keeps file and http discovery only): both reject `kubernetes_sd_configs`. With such a promtool
    the Kubernetes discovery blocks are checked here field by field and replaced by static targets, so promtool still
    checks everything else (relabel regexes and actions, intervals, file_sd); the collector itself checks them as
    they are (test_collector_validate.py). Debian's 2.42 also predates `scrape_protocols`.
    """
    tool = promtool(version)
    embedded = config["receivers"]["prometheus"]["config"]
    assert not env_references(embedded), "promtool cannot check ${env:...} inside the scrape config"
    prometheus_config = unescape_collector(embedded)
    path = tmp_path / "prometheus-receiver.yml"
    path.write_text(yaml.safe_dump(prometheus_config, sort_keys=False), encoding="utf-8")
    result = subprocess.run([tool, "check", "config", str(path)], capture_output=True, text=True, check=False)
    if result.returncode != 0 and "field scrape_protocols not found" in result.stderr:
        prometheus_config = without_scrape_protocols(prometheus_config)
        path.write_text(yaml.safe_dump(prometheus_config, sort_keys=False), encoding="utf-8")
        result = subprocess.run([tool, "check", "config", str(path)], capture_output=True, text=True, check=False)
    if result.returncode != 0 and "field kubernetes_sd_configs not found" in result.stderr:
        path.write_text(yaml.safe_dump(without_kubernetes_sd(prometheus_config), sort_keys=False), encoding="utf-8")
        result = subprocess.run([tool, "check", "config", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"promtool check config failed:\n{result.stdout}\n{result.stderr}"
    assert "SUCCESS" in result.stdout, result.stdout
    # The unescaped relabel rules are what Prometheus expects.
    jobs = {job["job_name"]: job for job in prometheus_config["scrape_configs"]}
    assert set(jobs) == {"kubernetes-pods", "rollout-servers", "ray"}
    for name in ("kubernetes-pods", "rollout-servers"):
        address = [r for r in jobs[name]["relabel_configs"] if r.get("target_label") == "__address__"]
        assert [r["replacement"] for r in address] == ["$1:$2"], name
    assert jobs["ray"]["file_sd_configs"][0]["files"] == ["/tmp/ray/prom_metrics_service_discovery.json"]


def test_promtool_catches_a_broken_embedded_config(config: dict[str, Any], tmp_path: Path) -> None:
    """The check above can fail: an invalid relabel regex in the same config is rejected."""
    tool = promtool()
    broken = without_kubernetes_sd(
        without_scrape_protocols(unescape_collector(config["receivers"]["prometheus"]["config"]))
    )
    broken["scrape_configs"][0]["relabel_configs"][0]["regex"] = "(unclosed"
    path = tmp_path / "broken.yml"
    path.write_text(yaml.safe_dump(broken, sort_keys=False), encoding="utf-8")
    result = subprocess.run([tool, "check", "config", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode != 0, result.stdout


def test_receiver_asks_for_the_classic_text_format(config: dict[str, Any]) -> None:
    """The format vLLM, SGLang and Ray serve and the bridge's scrape path reads, so a series is the same whichever
    path brought it (collector/otelcol.yaml says when to add OpenMetrics)."""
    protocols = config["receivers"]["prometheus"]["config"]["global"]["scrape_protocols"]
    assert protocols
    assert all(p.startswith("PrometheusText") for p in protocols)


def test_k8s_attributes_tags_do_not_collide_with_relabelled_labels(config: dict[str, Any]) -> None:
    """A resource attribute becomes a label with dots as `_` (resource_constant_labels): none may equal a label that
    relabel_configs already set, or different values would be merged as "a;b". The default tag of a pod label is
    k8s.pod.label.<key> in v1.x (its EmitV1K8sConventions gate is on by default)."""
    extract = config["processors"]["k8s_attributes"]["extract"]
    tags = [entry.get("tag_name", f"k8s.pod.label.{entry['key']}") for entry in extract.get("labels", [])]
    converted = {re.sub(r"[^a-zA-Z0-9_]", "_", tag) for tag in [*tags, *extract["metadata"]]}
    relabelled = {
        rule["target_label"]
        for job in config["receivers"]["prometheus"]["config"]["scrape_configs"]
        for rule in job.get("relabel_configs", [])
        if "target_label" in rule and not rule["target_label"].startswith("__")
    }
    assert relabelled
    assert not converted & relabelled
