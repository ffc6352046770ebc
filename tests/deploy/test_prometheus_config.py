"""collector/prometheus.yml, the in-cluster Prometheus config and the recording rules pass promtool, and the rules'
unit tests (collector/rules/*.test.yml) pass ``promtool test rules``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from otel_bridge.producers.presets import VLLM
from tests.deploy.support import (
    IN_CLUSTER_PROMETHEUS_CONFIG,
    PROMETHEUS_CONFIG,
    RULES_DIR,
    load_yaml,
    one,
    promtool,
    render,
    run_tool,
)

RULE_FILES = sorted(p for p in RULES_DIR.glob("*.yml") if not p.name.endswith(".test.yml"))
RULE_TESTS = sorted(RULES_DIR.glob("*.test.yml"))


def test_rule_files_exist_and_each_has_unit_tests() -> None:
    assert [p.name for p in RULE_FILES] == ["vllm.rules.yml"]
    for rules in RULE_FILES:
        test_file = rules.with_name(rules.name.removesuffix(".yml") + ".test.yml")
        assert test_file in RULE_TESTS, f"{rules.name} has no {test_file.name}"


def test_prometheus_yml_passes_promtool() -> None:
    output = run_tool([promtool(), "check", "config", str(PROMETHEUS_CONFIG)])
    # The rule files are found relative to the config file, and checked too.
    assert "SUCCESS: 1 rule files found" in output, output
    config = load_yaml(PROMETHEUS_CONFIG)
    assert {job["job_name"] for job in config["scrape_configs"]} == {"ray", "rollout", "trainer"}
    (ray,) = (job for job in config["scrape_configs"] if job["job_name"] == "ray")
    assert ray["file_sd_configs"][0]["files"] == ["/tmp/ray/prom_metrics_service_discovery.json"]


def test_in_cluster_prometheus_config_passes_promtool(tmp_path: Path) -> None:
    """The in-cluster config, with its rule glob pointed at what the prometheus-rules ConfigMap mounts."""
    rules = one(render("base"), "ConfigMap", "prometheus-rules")["data"]
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    for name, text in rules.items():
        (rules_dir / name).write_text(text, encoding="utf-8")
    config = load_yaml(IN_CLUSTER_PROMETHEUS_CONFIG)
    (pattern,) = config["rule_files"]
    config["rule_files"] = [str(rules_dir / Path(pattern).name)]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    output = run_tool([promtool(), "check", "config", str(path)])
    assert f"SUCCESS: {len(rules)} rule files found" in output, output


@pytest.mark.parametrize("rules", RULE_FILES, ids=lambda p: p.name)
def test_rules_pass_promtool_check(rules: Path) -> None:
    output = run_tool([promtool(), "check", "rules", str(rules)])
    assert "SUCCESS" in output, output


@pytest.mark.parametrize("tests", RULE_TESTS, ids=lambda p: p.name)
def test_rules_unit_tests_pass(tests: Path) -> None:
    output = run_tool([promtool(), "test", "rules", tests.name], cwd=tests.parent)
    assert "SUCCESS" in output, output


def test_every_recording_rule_is_unit_tested_and_named_by_convention() -> None:
    recorded = [rule["record"] for path in RULE_FILES for g in load_yaml(path)["groups"] for rule in g["rules"]]
    tested = {
        case["expr"].split("{", 1)[0]
        for path in RULE_TESTS
        for test in load_yaml(path)["tests"]
        for case in test.get("promql_expr_test", [])
    }
    assert set(recorded) <= tested, f"recording rules without a unit test: {sorted(set(recorded) - tested)}"
    assert len(recorded) == len(set(recorded)), "a series recorded twice"
    for name in recorded:
        assert re.fullmatch(r"[a-z_]+:[a-z0-9_]+:[a-z0-9_]+", name), f"{name} is not level:metric:operation"


def test_rules_cover_the_vllm_preset() -> None:
    """Every metric of otel-bridge's vllm preset has a recording rule, so dashboards show what the tracker shows."""
    exprs = " ".join(rule["expr"] for path in RULE_FILES for g in load_yaml(path)["groups"] for rule in g["rules"])
    for entry in VLLM:
        if "ratio" in entry:
            names = [entry["ratio"]["numerator"], entry["ratio"]["denominator"]]
        elif entry["type"] == "histogram":
            names = [f"{entry['name']}_bucket"]
        else:
            names = [entry["name"]]
        for name in names:
            assert re.search(rf"\b{re.escape(name)}\b", exprs), f"no recording rule reads {name}"
