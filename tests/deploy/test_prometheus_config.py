"""collector/prometheus.yml, the in-cluster Prometheus config and the recording rules pass promtool, and the rules'
unit tests (collector/rules/*.test.yml) pass ``promtool test rules``."""

from __future__ import annotations

import math
import re
import subprocess
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
BRIDGE_RULES = RULES_DIR / "otel-bridge.rules.yml"  # generated, tested below against its generator's meaning
HANDWRITTEN = [p for p in RULE_FILES if p != BRIDGE_RULES]


def test_rule_files_exist_and_each_has_unit_tests() -> None:
    assert [p.name for p in RULE_FILES] == ["otel-bridge.rules.yml", "vllm.rules.yml"]
    for rules in HANDWRITTEN:
        test_file = rules.with_name(rules.name.removesuffix(".yml") + ".test.yml")
        assert test_file in RULE_TESTS, f"{rules.name} has no {test_file.name}"


def test_prometheus_yml_passes_promtool(prometheus_version: str) -> None:
    output = run_tool([promtool(prometheus_version), "check", "config", str(PROMETHEUS_CONFIG)])
    # The rule files are found relative to the config file, and checked too.
    assert "SUCCESS: 2 rule files found" in output, output
    config = load_yaml(PROMETHEUS_CONFIG)
    assert {job["job_name"] for job in config["scrape_configs"]} == {"ray", "rollout", "trainer"}
    (ray,) = (job for job in config["scrape_configs"] if job["job_name"] == "ray")
    assert ray["file_sd_configs"][0]["files"] == ["/tmp/ray/prom_metrics_service_discovery.json"]


def test_in_cluster_prometheus_config_passes_promtool(tmp_path: Path, prometheus_version: str) -> None:
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
    output = run_tool([promtool(prometheus_version), "check", "config", str(path)])
    assert f"SUCCESS: {len(rules)} rule files found" in output, output


@pytest.mark.parametrize("rules", RULE_FILES, ids=lambda p: p.name)
def test_rules_pass_promtool_check(rules: Path, prometheus_version: str) -> None:
    output = run_tool([promtool(prometheus_version), "check", "rules", str(rules)])
    assert "SUCCESS" in output, output


@pytest.mark.parametrize("tests", RULE_TESTS, ids=lambda p: p.name)
def test_rules_unit_tests_pass(tests: Path, prometheus_version: str) -> None:
    """The files' values are exact on Prometheus 2 (a 1m range at 15 s holds 5 samples spanning 60 s). Prometheus 3's
    ranges are left-open: the same window holds 4 samples spanning 45 s and the rate is extrapolated over 60 s, which
    lands a few units in the last place off (9.999999999999998 for 10). There every difference promtool reports must
    be that and nothing else: the same series, values equal to 1e-12 relative."""
    if prometheus_version.startswith("2."):
        output = run_tool([promtool(prometheus_version), "test", "rules", tests.name], cwd=tests.parent)
        assert "SUCCESS" in output, output
        return
    command = [promtool(prometheus_version), "test", "rules", tests.name]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tests.parent, timeout=60, check=False)
    output = done.stdout + done.stderr
    if done.returncode == 0:
        assert "SUCCESS" in output, output
        return
    expected, got = _reported("exp", output), _reported("got", output)
    assert expected, output
    assert len(expected) == len(got), output
    for want, have in zip(expected, got, strict=True):
        assert [labels for labels, _ in want] == [labels for labels, _ in have], output
        for (_, a), (_, b) in zip(want, have, strict=True):
            assert math.isclose(a, b, rel_tol=1e-12), f"{a} vs {b}\n{output}"


def _reported(which: str, output: str) -> list[list[tuple[str, float]]]:
    """promtool's ``exp:``/``got:`` lines: per failing expression, its series as (labels, value) pairs."""
    found = []
    for line in output.splitlines():
        if line.strip().startswith(f"{which}:"):
            found.append([(m[0], float(m[1])) for m in re.findall(r"(\{[^}]*\}) ([-+0-9.eE]+)", line)])
    return found


def test_every_recording_rule_is_unit_tested_and_named_by_convention() -> None:
    recorded = [rule["record"] for path in HANDWRITTEN for g in load_yaml(path)["groups"] for rule in g["rules"]]
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
    exprs = " ".join(rule["expr"] for path in HANDWRITTEN for g in load_yaml(path)["groups"] for rule in g["rules"])
    for entry in VLLM:
        if "ratio" in entry:
            names = [entry["ratio"]["numerator"], entry["ratio"]["denominator"]]
        elif entry["type"] == "histogram":
            names = [f"{entry['name']}_bucket"]
        else:
            names = [entry["name"]]
        for name in names:
            assert re.search(rf"\b{re.escape(name)}\b", exprs), f"no recording rule reads {name}"


# -- otel-bridge's own rules (prometheus.recording_rules) --------------------------------------------------------------


def test_bridge_rules_are_what_the_generator_writes_for_the_vllm_preset(tmp_path: Path) -> None:
    """The shipped file is `otel-bridge prometheus-rules` for the defaults (the vllm preset, 15 s), byte for byte."""
    from otel_bridge.cli import main

    out = tmp_path / "otel-bridge.rules.yml"
    assert main(["--quiet", "prometheus-rules", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == BRIDGE_RULES.read_text(encoding="utf-8"), (
        "collector/rules/otel-bridge.rules.yml is stale: regenerate it with "
        "`otel-bridge prometheus-rules collector/rules/otel-bridge.rules.yml`"
    )


def test_bridge_rules_sum_last_samples_and_flag_restarted_targets(tmp_path: Path, prometheus_version: str) -> None:
    """promtool evaluates the shipped rule over two replicas (b restarts at 2m45s) and finds, at 4m: each counting
    series' last samples summed, b flagged by the resets part, both present, and the age of the oldest last sample."""
    from otel_bridge.config import MetricConfig
    from otel_bridge.producers.metric_set import resolve_metrics
    from otel_bridge.producers.promql._internal.rules import AGE, PRESENT, RESETS, counting, sum_part, target_parts

    queries = [q for q in resolve_metrics([MetricConfig(preset="vllm")]) if counting(q)]
    series, cases = [], []
    for query in queries:
        for position, name in enumerate(query.series_names()):
            le = ',le="+Inf"' if name.endswith("_bucket") else ""
            a, b = f'{{instance="a:8000",job="rollout"{le}}}', f'{{instance="b:8000",job="rollout"{le}}}'
            series.append({"series": name + a, "values": "0+10x20"})  # 160 at 4m
            series.append({"series": name + b, "values": "0+5x10 0+1x10"})  # restarted: 5 at 4m
            labels = {"le": "+Inf"} if le else {}
            part = sum_part(query, position)
            cases.append({"expr": part.selector, "eval_time": "4m",
                          "exp_samples": [{"labels": _labels(part.part, labels), "value": 165}]})  # fmt: skip
    part_of = {p.selector: p.part for p in target_parts(queries)}
    b_target = {"instance": "b:8000", "job": "rollout"}
    resets = [{"labels": _labels(part_of[RESETS], b_target), "value": 1}]
    cases.append({"expr": RESETS, "eval_time": "4m", "exp_samples": resets})
    targets = ("a:8000", "b:8000")
    present = [{"labels": _labels(part_of[PRESENT], {"instance": t, "job": "rollout"}), "value": 1} for t in targets]
    cases.append({"expr": PRESENT, "eval_time": "4m", "exp_samples": present})
    cases.append({"expr": AGE, "eval_time": "4m", "exp_samples": [{"labels": _labels(part_of[AGE], {}), "value": 0}]})
    (tmp_path / BRIDGE_RULES.name).write_text(BRIDGE_RULES.read_text(encoding="utf-8"), encoding="utf-8")
    test = {"rule_files": [BRIDGE_RULES.name], "evaluation_interval": "15s",
            "tests": [{"interval": "15s", "input_series": series, "promql_expr_test": cases}]}  # fmt: skip
    (tmp_path / "bridge.test.yml").write_text(yaml.safe_dump(test, sort_keys=False), encoding="utf-8")
    output = run_tool([promtool(prometheus_version), "test", "rules", "bridge.test.yml"], cwd=tmp_path)
    assert "SUCCESS" in output, output


def _labels(part: str, labels: dict[str, str]) -> str:
    """The series of the bridge's rule holding ``part`` with ``labels``, as promtool's expected samples name it."""
    from otel_bridge.producers.promql._internal.rules import PART_LABEL, RECORD

    inner = ",".join(f'{k}="{v}"' for k, v in sorted({PART_LABEL: part, **labels}.items()))
    return f"{RECORD}{{{inner}}}"
