"""collector/otelcol.yaml checked by the collector itself: the v0.165 distribution built from collector/manifest.yaml
(``make peer-otelcol``) validates the shipped file and each kustomize rendering's config with that rendering's
environment, refuses what v0.165 no longer takes, and holds exactly the components the config uses.

The build lacks the components the Go module proxy here cannot serve (tests/helpers/peers.py,
``UNAVAILABLE_COMPONENTS``: k8s_attributes); the configs are validated without those and nothing else.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.support import (
    COLLECTOR_ENV,
    OTELCOL_CONFIG,
    OTELCOL_MANIFEST,
    OVERLAYS,
    container_of,
    load_yaml,
    one,
    render,
)
from tests.helpers.collector import CollectorProcess, otelcol_binary, runnable, validate
from tests.helpers.http_servers import free_port
from tests.helpers.peers import UNAVAILABLE_COMPONENTS, UNAVAILABLE_MODULES

KINDS = ("receivers", "processors", "exporters", "extensions", "connectors")
POD_IP = COLLECTOR_ENV["MY_POD_IP"]


def write(tmp_path: Path, config: dict[str, Any], name: str = "otelcol.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def checked(result: subprocess.CompletedProcess[str]) -> str:
    """The output of a validate run that must pass: exit 0 and not a line of output (a warning is a failure too)."""
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 0, f"otelcol validate exited with {result.returncode}:\n{output}"
    assert not output, f"otelcol validate passed but said:\n{output}"
    return output


def test_shipped_config_validates(tmp_path: Path) -> None:
    config = runnable(load_yaml(OTELCOL_CONFIG))
    checked(validate(write(tmp_path, config), COLLECTOR_ENV))


@pytest.mark.parametrize("rendering", ["base", *OVERLAYS])
def test_each_rendering_config_validates_with_its_environment(rendering: str, tmp_path: Path) -> None:
    """The ConfigMap a rendering mounts, with the environment its Deployment sets (the downward API's pod IP
    replaced by an address)."""
    objects = render(rendering)
    data = one(objects, "ConfigMap", "otel-collector-config")["data"]["otelcol.yaml"]
    env: dict[str, str] = {}
    for variable in container_of(objects, "otel-collector").get("env", []):
        if "value" in variable:
            env[variable["name"]] = variable["value"]
        else:
            assert variable["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}, variable
            env[variable["name"]] = POD_IP
    checked(validate(write(tmp_path, runnable(yaml.safe_load(data))), env))


def test_validate_refuses_what_v0165_does_not_take(tmp_path: Path) -> None:
    """The check can fail: a misspelt field, a field the v0.165 prometheus receiver dropped (use_start_time_metric),
    a remote-write translation strategy that needs remote write 2.0, and an unset environment variable."""
    shipped = runnable(load_yaml(OTELCOL_CONFIG))
    cases: list[tuple[str, dict[str, Any], dict[str, str], str]] = []
    typo = yaml.safe_load(yaml.safe_dump(shipped))
    typo["receivers"]["otlp"]["protocols"]["grpc"]["endpont"] = "0.0.0.0:4317"
    cases.append(("typo", typo, COLLECTOR_ENV, "endpont"))
    dropped = yaml.safe_load(yaml.safe_dump(shipped))
    dropped["receivers"]["prometheus"]["use_start_time_metric"] = True
    cases.append(("dropped", dropped, COLLECTOR_ENV, "use_start_time_metric"))
    utf8 = yaml.safe_load(yaml.safe_dump(shipped))
    utf8["exporters"]["prometheus_remote_write"]["translation_strategy"] = "NoTranslation"
    cases.append(("utf8", utf8, COLLECTOR_ENV, "requires Prometheus Remote Write 2.0"))
    unset = {k: v for k, v in COLLECTOR_ENV.items() if k != "PROMETHEUS_REMOTE_WRITE_ENDPOINT"}
    cases.append(("unset", shipped, unset, "prometheus_remote_write"))
    for name, config, env, expected in cases:
        result = validate(write(tmp_path, config, f"{name}.yaml"), env)
        output = result.stdout + result.stderr
        assert result.returncode != 0, f"{name}: validate passed:\n{output}"
        assert expected in output, f"{name}: {expected!r} not in:\n{output}"


def test_a_deprecated_alias_is_caught_in_the_log(tmp_path: Path) -> None:
    """What the end-to-end test's log check relies on: validate accepts the v0.136 names (deprecated aliases), but
    the running collector warns about each, and :meth:`CollectorProcess.log_problems` reports the warnings."""
    config = runnable(load_yaml(OTELCOL_CONFIG))
    config["exporters"]["otlphttp/traces"] = config["exporters"].pop("otlp_http/traces")
    traces = config["service"]["pipelines"]["traces"]
    traces["exporters"] = ["otlphttp/traces" if e == "otlp_http/traces" else e for e in traces["exporters"]]
    config["receivers"]["prometheus"]["config"]["scrape_configs"] = [
        {"job_name": "nothing", "static_configs": [{"targets": []}]}
    ]
    health = free_port()
    ports = {name: free_port() for name in ("grpc", "http", "pprof", "telemetry")}
    config["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"] = f"127.0.0.1:{ports['grpc']}"
    config["receivers"]["otlp"]["protocols"]["http"]["endpoint"] = f"127.0.0.1:{ports['http']}"
    config["extensions"]["health_check"]["endpoint"] = f"127.0.0.1:{health}"
    config["extensions"]["pprof"]["endpoint"] = f"127.0.0.1:{ports['pprof']}"
    reader = config["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]["prometheus"]
    reader.update(host="127.0.0.1", port=ports["telemetry"])
    checked(validate(write(tmp_path, config, "aliased.yaml"), COLLECTOR_ENV))
    env = {**COLLECTOR_ENV, "MY_POD_IP": "127.0.0.1", "PROMETHEUS_REMOTE_WRITE_ENDPOINT": "http://127.0.0.1:9/w"}
    with CollectorProcess(tmp_path / "aliased", config, env, health) as collector:
        pass
    problems = collector.log_problems()
    assert [p for p in problems if '"otlphttp" alias is deprecated; use "otlp_http" instead' in p], problems


def components_of_build() -> dict[str, dict[str, tuple[str, str]]]:
    """``{kind: {module path: (component type, module version)}}`` of the built distribution (``otelcol
    components``)."""
    result = subprocess.run([otelcol_binary(), "components"], capture_output=True, text=True, timeout=60, check=True)
    listed = yaml.safe_load(result.stdout)
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for kind in KINDS:
        out[kind] = {}
        for entry in listed.get(kind) or []:
            module, version = entry["module"].split(" ")
            out[kind][module] = (entry["name"], version)
    return out


def test_manifest_holds_exactly_the_components_of_the_config() -> None:
    """collector/manifest.yaml lists one module per component type collector/otelcol.yaml uses and no other; the
    build has each of them at the manifest's version, except the ones the proxy here cannot serve."""
    manifest = load_yaml(OTELCOL_MANIFEST)
    config = load_yaml(OTELCOL_CONFIG)
    build = components_of_build()
    problems: list[str] = []
    listed_anywhere: set[str] = set()
    for kind in KINDS:
        modules = dict(entry["gomod"].split(" ") for entry in manifest.get(kind) or [])
        listed_anywhere |= set(modules)
        used = {component_id.split("/")[0] for component_id in config.get(kind) or {}}
        built = {name for name, _ in build[kind].values()}
        if built | set(UNAVAILABLE_COMPONENTS.get(kind, ())) != used:
            problems.append(f"{kind}: the config uses {sorted(used)}, the build has {sorted(built)}")
        expected = set(build[kind]) | {module for module in UNAVAILABLE_MODULES if module in modules}
        if set(modules) != expected:
            problems.append(f"{kind}: the manifest lists {sorted(modules)}, expected {sorted(expected)}")
        problems += [
            f"{module}: built at {build[kind][module][1]}, the manifest says {version}"
            for module, version in modules.items()
            if module in build[kind] and build[kind][module][1] != version
        ]
    problems += [f"{module} is not in the manifest" for module in UNAVAILABLE_MODULES if module not in listed_anywhere]
    assert not problems, "\n".join(problems)
