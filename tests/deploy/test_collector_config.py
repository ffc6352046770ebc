"""collector/otelcol.yaml: only components and fields of the pinned release, well-formed pipelines, and an embedded
Prometheus scrape config that promtool accepts.

There is no otelcol binary here, so the config is checked against collector/schema/otelcol-contrib-<version>.yaml
(see its header for where it came from and how to extend it).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.support import (
    COLLECTOR_SCHEMA,
    COLLECTOR_VERSION,
    OTELCOL_CONFIG,
    env_references,
    load_yaml,
    promtool,
    string_values,
)

KINDS = ("receivers", "processors", "exporters", "extensions", "connectors")
PIPELINE_ID = re.compile(r"^(metrics|traces|logs)(/[A-Za-z0-9_.\-]+)?$")
COMPONENT_ID = re.compile(r"^([a-z][a-z0-9_]*)(/[^/\s]+)?$")


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    loaded: dict[str, Any] = load_yaml(OTELCOL_CONFIG)
    return loaded


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = load_yaml(COLLECTOR_SCHEMA)
    return loaded


def component_type(component_id: str) -> str:
    match = COMPONENT_ID.match(component_id)
    assert match, f"{component_id!r} is not a component id (type or type/name)"
    return match.group(1)


def unknown_fields(value: Any, spec: Any, path: str) -> list[str]:
    """Where ``value`` has fields ``spec`` (the schema's notation, see its header) does not allow."""
    if spec is None:
        return []
    if isinstance(spec, dict) and "[]" in spec:
        if not isinstance(value, list):
            return [f"{path}: expected a list, got {type(value).__name__}"]
        return [err for i, item in enumerate(value) for err in unknown_fields(item, spec["[]"], f"{path}[{i}]")]
    if isinstance(spec, dict) and "*" in spec:
        if not isinstance(value, dict):
            return [f"{path}: expected a mapping, got {type(value).__name__}"]
        return [err for key, item in value.items() for err in unknown_fields(item, spec["*"], f"{path}.{key}")]
    if value is None:  # `key:` with nothing after it takes the component's defaults
        return []
    if not isinstance(value, dict):
        return [f"{path}: expected a mapping, got {type(value).__name__}"]
    errors = []
    for key, item in value.items():
        if key not in spec:
            errors.append(f"{path}.{key}: unknown field (allowed: {', '.join(sorted(spec))})")
        else:
            errors.extend(unknown_fields(item, spec[key], f"{path}.{key}"))
    return errors


def test_schema_is_for_the_pinned_release(schema: dict[str, Any]) -> None:
    assert str(schema["version"]) == COLLECTOR_VERSION
    assert f"v{COLLECTOR_VERSION}" in OTELCOL_CONFIG.read_text(encoding="utf-8").split("\n\n", 1)[0]
    # Every described component is a module of that release.
    for kind in KINDS:
        for name, described in (schema["components"].get(kind) or {}).items():
            assert described["module"] in schema["distribution"][kind], f"{kind}.{name}: {described['module']}"


def test_top_level_sections(config: dict[str, Any]) -> None:
    assert set(config) <= {*KINDS, "service"}, set(config) - {*KINDS, "service"}
    assert "service" in config


@pytest.mark.parametrize("kind", KINDS)
def test_components_exist_in_the_release_and_use_known_fields(
    config: dict[str, Any], schema: dict[str, Any], kind: str
) -> None:
    described = schema["components"].get(kind) or {}
    errors = []
    for component_id, settings in (config.get(kind) or {}).items():
        type_ = component_type(component_id)
        if type_ not in described:
            errors.append(
                f"{kind}.{component_id}: `{type_}` is not described in {COLLECTOR_SCHEMA.name}; if the release has it "
                f"({', '.join(schema['distribution'][kind][:5])}, ...), add it with its fields from its config.go"
            )
            continue
        errors.extend(unknown_fields(settings, described[type_]["fields"], f"{kind}.{component_id}"))
    assert not errors, "\n".join(errors)


def test_schema_check_rejects_typos_and_removed_components(config: dict[str, Any], schema: dict[str, Any]) -> None:
    """The field check can fail: a misspelt field, a field of the wrong shape, and the `logging` exporter (removed
    in v0.111.0; use `debug`) are all reported."""
    exporters = schema["components"]["exporters"]
    receivers = schema["components"]["receivers"]
    typo = {"protocols": {"grpc": {"endpont": "0.0.0.0:4317"}}}
    allowed = ", ".join(sorted(receivers["otlp"]["fields"]["protocols"]["grpc"]))
    assert unknown_fields(typo, receivers["otlp"]["fields"], "otlp") == [
        f"otlp.protocols.grpc.endpont: unknown field (allowed: {allowed})"
    ]
    shape = {"resource_to_telemetry_conversion": True}
    assert unknown_fields(shape, exporters["prometheusremotewrite"]["fields"], "prw") == [
        "prw.resource_to_telemetry_conversion: expected a mapping, got bool"
    ]
    assert "logging" not in exporters
    assert "loggingexporter" not in schema["distribution"]["exporters"]


def test_schema_describes_the_prometheus_exporter(schema: dict[str, Any]) -> None:
    """The pull alternative to remote write (issue 17 section 4: the schema lacked the exporter and its `endpoint`):
    a usual prometheus exporter block passes, a field of a later release does not."""
    fields = schema["components"]["exporters"]["prometheus"]["fields"]
    assert schema["components"]["exporters"]["prometheus"]["module"] == "prometheusexporter"
    usual = {
        "endpoint": "${env:MY_POD_IP}:8889",
        "tls": {"cert_file": "/certs/tls.crt", "key_file": "/certs/tls.key"},
        "namespace": "rl",
        "const_labels": {"cluster": "a"},
        "send_timestamps": True,
        "metric_expiration": "5m",
        "resource_to_telemetry_conversion": {"enabled": True},
        "enable_open_metrics": False,
        "add_metric_suffixes": True,
    }
    assert unknown_fields(usual, fields, "prometheus") == []
    later = unknown_fields({"sending_queue": {"enabled": True}, "without_scope_info": True}, fields, "prometheus")
    assert [error.split(":")[0] for error in later] == ["prometheus.sending_queue", "prometheus.without_scope_info"]


def test_translation_strategy_is_a_prometheus_exporter_field_only(schema: dict[str, Any]) -> None:
    """In v0.136.0 the prometheus exporter has translation_strategy (its DisableAddMetricSuffixes feature gate is
    registered from v0.132.0: contrib exporter/prometheusexporter/internal/metadata/generated_feature_gates.go at commit
    40c9eb77), prometheusremotewrite does not (added in 2026 by contrib PR #47714): the collector would refuse it there,
    and so does this check. metrics[].otlp mirrors both (otel_bridge/config_otlp.py)."""
    exporters = schema["components"]["exporters"]
    strategy = {"translation_strategy": "UnderscoreEscapingWithoutSuffixes"}
    assert unknown_fields(strategy, exporters["prometheus"]["fields"], "prometheus") == []
    refused = unknown_fields(strategy, exporters["prometheusremotewrite"]["fields"], "prw")
    assert [error.split(":")[0] for error in refused] == ["prw.translation_strategy"]
    bare = {"add_metric_suffixes": False}
    assert unknown_fields(bare, exporters["prometheusremotewrite"]["fields"], "prw") == []
    # disable_scope_info is 2026 (contrib PR #46096); the nested http block is seen only in a 2026 config.schema.yaml
    # (commit 0b1718bc) and not confirmed for this release: both refused
    later = unknown_fields(
        {"disable_scope_info": True, "http": {}}, exporters["prometheusremotewrite"]["fields"], "prw"
    )
    assert [error.split(":")[0] for error in later] == ["prw.disable_scope_info", "prw.http"]


def test_service_section(config: dict[str, Any], schema: dict[str, Any]) -> None:
    service = config["service"]
    errors = unknown_fields(service, schema["service"], "service")
    assert not errors, "\n".join(errors)
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
    assert pipeline["processors"] == ["memory_limiter", "resource", "k8sattributes", "batch"]
    assert pipeline["exporters"] == ["prometheusremotewrite", "debug"]
    otlp = config["receivers"]["otlp"]["protocols"]
    assert otlp["grpc"]["endpoint"].endswith(":4317")
    assert otlp["http"]["endpoint"].endswith(":4318")
    assert config["exporters"]["prometheusremotewrite"]["endpoint"] == "${env:PROMETHEUS_REMOTE_WRITE_ENDPOINT}"
    # Self-telemetry on: the collector's own metrics are served for Prometheus.
    metrics = config["service"]["telemetry"]["metrics"]
    assert metrics["level"] in {"basic", "normal", "detailed"}
    assert metrics["readers"][0]["pull"]["exporter"]["prometheus"]["port"] == 8888
    # Profiling and zpages are reachable through port-forward only.
    assert config["extensions"]["pprof"]["endpoint"].startswith("localhost:")
    assert config["extensions"]["zpages"]["endpoint"].startswith("localhost:")


def test_traces_pipeline_forwards_step_traces_to_a_trace_store(config: dict[str, Any]) -> None:
    """The bridge's step traces (OTLP in) go, batched, to a trace store over OTLP/HTTP whose URL comes from the
    environment."""
    pipeline = config["service"]["pipelines"]["traces"]
    assert pipeline["receivers"] == ["otlp"]
    assert pipeline["processors"][0] == "memory_limiter"
    assert pipeline["processors"][-1] == "batch"
    assert "otlphttp/traces" in pipeline["exporters"]
    exporter = config["exporters"]["otlphttp/traces"]
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


def test_embedded_prometheus_config_passes_promtool(config: dict[str, Any], tmp_path: Path) -> None:
    """The receiver's `config` is a Prometheus config: promtool must accept it once `$$` is unescaped.

    Debian's promtool is built without Kubernetes service discovery and rejects `kubernetes_sd_configs`; with such a
    promtool the Kubernetes discovery blocks are checked here field by field and replaced by static targets, so
    promtool still checks everything else (relabel regexes and actions, intervals, file_sd). An upstream promtool
    checks the whole config as is.
    """
    tool = promtool()
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


def test_receiver_never_negotiates_openmetrics(config: dict[str, Any]) -> None:
    """v0.136's receiver mishandles OpenMetrics counters' `_created` lines: only classic text is asked for."""
    protocols = config["receivers"]["prometheus"]["config"]["global"]["scrape_protocols"]
    assert protocols
    assert all(p.startswith("PrometheusText") for p in protocols)


def test_k8sattributes_tags_do_not_collide_with_relabelled_labels(config: dict[str, Any]) -> None:
    """A resource attribute becomes a label with dots as `_` (resource_to_telemetry_conversion): none may equal a label
    that relabel_configs already set, or different values would be merged as "a;b"."""
    extract = config["processors"]["k8sattributes"]["extract"]
    tags = [entry.get("tag_name", f"k8s.pod.labels.{entry['key']}") for entry in extract.get("labels", [])]
    converted = {re.sub(r"[^a-zA-Z0-9_]", "_", tag) for tag in [*tags, *extract["metadata"]]}
    relabelled = {
        rule["target_label"]
        for job in config["receivers"]["prometheus"]["config"]["scrape_configs"]
        for rule in job.get("relabel_configs", [])
        if "target_label" in rule and not rule["target_label"].startswith("__")
    }
    assert relabelled
    assert not converted & relabelled
