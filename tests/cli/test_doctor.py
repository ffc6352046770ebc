"""``otel-bridge doctor`` as a subprocess against a real Prometheus scraping simulated vLLM servers."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.cli.support import check_named, run_cli, validate_doctor_json, write_config
from tests.conftest import Replica
from tests.faults.support import CountingServer, RewrittenIncreases, lying_prometheus
from tests.helpers.client_exporter import ClientExporter
from tests.helpers.http_servers import free_port
from tests.helpers.prometheus_server import PrometheusServer

pytestmark = pytest.mark.integration


def promql_config(prometheus: PrometheusServer, metrics: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "prometheus": {"url": prometheus.url, "scrape_interval_s": 1, "retries": 0},
        "metrics": metrics,
        "trackers": [{"type": "jsonl"}, {"type": "tensorboard"}],
        **extra,
    }


def wait_for_target_health(prom: PrometheusServer, wanted: set[str], timeout_s: float = 30.0) -> None:
    """Wait until Prometheus has scraped every target at least once and their health values are ``wanted``."""
    deadline = time.monotonic() + timeout_s
    seen: set[str] = set()
    while time.monotonic() < deadline:
        body = requests.get(f"{prom.url}/api/v1/targets", timeout=5).json()
        seen = {t["health"] for t in body["data"]["activeTargets"]}
        if seen == wanted:
            return
        time.sleep(0.5)
    raise AssertionError(f"target health {seen}, expected {wanted}")


def doctor_json(
    tmp_path: Path, config: dict[str, Any], env: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    path = write_config(tmp_path / "otel-bridge.yaml", config)
    done = run_cli(["doctor", "--config", str(path), "--json"], cwd=tmp_path, env=env)
    document = json.loads(done.stdout)
    validate_doctor_json(document)
    return done.returncode, document


def test_doctor_passes_when_everything_works(
    tmp_path: Path, prometheus: PrometheusServer, replicas: list[Replica]
) -> None:
    config = write_config(tmp_path / "otel-bridge.yaml", promql_config(prometheus, [{"preset": "vllm"}]))
    done = run_cli(["doctor", "--config", str(config)], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all checks passed" in done.stdout
    assert "FAIL" not in done.stdout
    assert "\x1b[" not in done.stdout  # NO_COLOR and not a terminal
    for line in ("prometheus targets", "metric vllm:generation_tokens_total", "tracker jsonl", "tracker tensorboard"):
        assert any(row.startswith("PASS") and line in row for row in done.stdout.splitlines()), line
    # which replicas answered: both instances are named
    tokens = next(row for row in done.stdout.splitlines() if "metric vllm:generation_tokens_total" in row)
    for replica in replicas:
        assert replica.hostport in tokens


def test_doctor_json_passes_and_validates(tmp_path: Path, prometheus: PrometheusServer) -> None:
    status, document = doctor_json(tmp_path, promql_config(prometheus, [{"preset": "vllm"}]))
    assert status == 0
    assert document["ok"] is True
    assert check_named(document, "config")["status"] == "pass"
    assert check_named(document, "ray")["status"] == "skip"
    assert check_named(document, "prometheus")["detail"].startswith(prometheus.url)
    assert check_named(document, "prometheus targets")["detail"] == "2/2 up"
    assert check_named(document, "deprecated names")["status"] == "pass"
    names = [c["name"] for c in document["checks"]]
    assert names.index("prometheus") < names.index("metric vllm:kv_cache_usage_perc") < names.index("tracker jsonl")


EXPECTED_PLAN = {  # version -> (what doctor reports the server to be, how a sample-bounded step is read)
    "2.42": ("Prometheus 2.42.0", "the samples around each boundary (no exact increase() in this store)"),
    "3.16": ("Prometheus 3.16.0", "one anchored increase() per window (exact: no extrapolation)"),
}


@pytest.mark.parametrize("rules", ["off", "auto"])
def test_doctor_names_the_store_its_version_and_the_plan_it_reads_steps_by(
    tmp_path: Path, prometheus: PrometheusServer, prometheus_version: str, rules: str
) -> None:
    """Which store and version ``prometheus.url`` is, and how a step will be read from it, come from the store itself
    (buildinfo and probe queries), not from a version guess: 2.42 has no exact increase, 3.16 has anchored ones;
    otel-bridge's recording rules are not loaded in this Prometheus, which the plan says."""
    config = promql_config(
        prometheus,
        [{"name": "vllm:generation_tokens_total", "type": "counter"}],
        run={"dir": str(tmp_path / "runs")},
    )
    config["prometheus"].update(boundary="samples", recording_rules=rules)
    status, document = doctor_json(tmp_path, config)
    assert status == 0, document
    server, deltas = EXPECTED_PLAN[prometheus_version]
    assert check_named(document, "prometheus")["detail"].startswith(f"{prometheus.url} (from config): {server}")
    plan = check_named(document, "query plan")
    assert plan["status"] == "pass"
    assert plan["detail"].startswith(server), plan
    assert f": a step's counters and histograms are read by {deltas};" in plan["detail"], plan
    assert ("recording rules are not used (Prometheus has no rule group" in plan["detail"]) == (rules == "auto"), plan


def test_doctor_fails_with_fix_when_prometheus_is_down(tmp_path: Path) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    config = {
        "prometheus": {"url": down, "retries": 0, "timeout_s": 2},
        "metrics": [{"preset": "vllm"}],
        "trackers": [{"type": "jsonl"}],
    }
    status, document = doctor_json(tmp_path, config)
    assert status == 1
    assert document["ok"] is False
    check = check_named(document, "prometheus")
    assert check["status"] == "fail"
    assert down in check["detail"]
    assert check["fix"] == f"start Prometheus at {down} or correct prometheus.url"
    assert check_named(document, "metrics")["status"] == "skip"
    assert check_named(document, "tracker jsonl")["status"] == "pass"  # the other checks still ran


def test_doctor_names_a_misspelled_metric_and_suggests_the_right_one(
    tmp_path: Path, prometheus: PrometheusServer
) -> None:
    metrics = [{"name": "vllm:generation_token_total", "type": "counter"}, {"name": "vllm:num_requests_running"}]
    status, document = doctor_json(tmp_path, promql_config(prometheus, metrics))
    assert status == 1
    bad = check_named(document, "metric vllm:generation_token_total")
    assert bad["status"] == "fail"
    assert bad["detail"] == (
        "no series for vllm:generation_token_total (nor vllm_generation_token_total, ray_vllm_generation_token_total)"
    )
    assert "did you mean vllm:generation_tokens_total" in bad["fix"]
    assert check_named(document, "metric vllm:num_requests_running")["status"] == "pass"


def test_doctor_names_the_form_the_store_holds_a_family_under(tmp_path: Path) -> None:
    """Prometheus 2.42 scraping a prometheus_client exporter stores vLLM's colons escaped: doctor finds the family
    there, says so, and its step reads it under the configured key."""
    metrics = [
        {"name": "vllm:generation_tokens_total", "type": "counter"},
        {"name": "vllm:time_to_first_token_seconds", "type": "histogram"},
        {"name": "vllm:num_requests_running", "type": "gauge"},
    ]
    with ClientExporter() as exporter, PrometheusServer(tmp_path / "prometheus", [exporter.hostport]) as prom:
        exporter.complete(10.0, 0.02)
        exporter.set_running(1.0)
        prom.wait_for_samples("vllm_generation_tokens_total", count=2)
        status, document = doctor_json(tmp_path, promql_config(prom, metrics))
    for metric in metrics:
        check = check_named(document, f"metric {metric['name']}")
        assert check["status"] == "pass", check
        stored = metric["name"].replace(":", "_")
        assert f"stored as {stored}" in check["detail"], check
        if metric["type"] != "histogram":  # a histogram without observations in the step records no value
            assert f"a step records rollout/{metric['name'].replace(':', '/')}" in check["detail"], check
    assert status == 0, document


def test_doctor_fails_on_a_deprecated_vllm_name_with_its_replacement(
    tmp_path: Path, prometheus: PrometheusServer
) -> None:
    status, document = doctor_json(tmp_path, promql_config(prometheus, [{"name": "vllm:gpu_cache_usage_perc"}]))
    assert status == 1
    check = check_named(document, "deprecated vllm:gpu_cache_usage_perc")
    assert check["status"] == "fail"
    assert check["fix"] == "replace it with vllm:kv_cache_usage_perc"
    # it is still queried as its replacement, which has series
    assert check_named(document, "metric vllm:kv_cache_usage_perc")["status"] == "pass"


def test_doctor_reports_a_down_scrape_target(tmp_path: Path, replicas: list[Replica], prometheus_version: str) -> None:
    prom = PrometheusServer(
        tmp_path / "prom",
        [replicas[0].hostport, f"127.0.0.1:{free_port()}"],
        scrape_interval_s=1.0,
        version=prometheus_version,
    )
    try:
        prom.start()
        wait_for_target_health(prom, {"up", "down"})
        status, document = doctor_json(tmp_path, promql_config(prom, [{"name": "vllm:num_requests_running"}]))
    finally:
        prom.stop()
    assert status == 1
    targets = check_named(document, "prometheus targets")
    assert targets["status"] == "fail"
    assert targets["detail"].startswith("1/2 up")
    assert "start the servers that are down" in targets["fix"]


def test_doctor_never_prints_secrets(tmp_path: Path, prometheus: PrometheusServer) -> None:
    secret = "s3cr3t-token-value-42"
    config = promql_config(prometheus, [{"preset": "vllm"}])
    config["prometheus"]["auth"] = {"bearer_token_env": "PROM_TOKEN"}
    path = write_config(tmp_path / "otel-bridge.yaml", config)
    for extra in ([], ["--json"], ["--verbose"]):
        done = run_cli(["doctor", "--config", str(path), *extra], cwd=tmp_path, env={"PROM_TOKEN": secret})
        assert done.returncode == 0, done.stdout + done.stderr
        assert secret not in done.stdout + done.stderr


def test_doctor_on_the_scrape_path(tmp_path: Path, replicas: list[Replica]) -> None:
    down = f"127.0.0.1:{free_port()}"
    config = {
        "scrape": {"targets": [r.hostport for r in replicas] + [down], "timeout_s": 2},
        "metrics": [{"preset": "vllm"}, {"name": "vllm:kv_cache_usage_perk", "type": "gauge"}],
        "trackers": [{"type": "jsonl"}],
    }
    status, document = doctor_json(tmp_path, config)
    assert status == 1
    assert check_named(document, "prometheus")["status"] == "skip"
    assert check_named(document, f"endpoint {replicas[0].url}")["status"] == "pass"
    dead = check_named(document, f"endpoint http://{down}/metrics")
    assert dead["status"] == "fail"
    assert "start the server" in dead["fix"]
    ok = check_named(document, "metric vllm:generation_tokens_total")
    assert ok["status"] == "pass"
    assert replicas[1].hostport in ok["detail"]
    typo = check_named(document, "metric vllm:kv_cache_usage_perk")
    assert typo["status"] == "fail"
    assert "did you mean vllm:kv_cache_usage_perc" in typo["fix"]


def test_doctor_reports_invalid_config_and_unwritable_tracker(tmp_path: Path) -> None:
    status, document = doctor_json(tmp_path, {"prometheus": {"url": "localhost:9090"}})
    assert status == 1
    config = check_named(document, "config")
    assert config["status"] == "fail"
    assert "prometheus.url" in config["detail"]
    assert all(c["status"] == "skip" for c in document["checks"][1:])

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where a directory should be", encoding="utf-8")
    status, document = doctor_json(tmp_path, {"trackers": [{"type": "jsonl", "path": str(blocker / "m.jsonl")}]})
    assert status == 1
    tracker = check_named(document, "tracker jsonl")
    assert tracker["status"] == "fail"
    assert tracker["fix"]
    assert check_named(document, "metrics")["status"] == "skip"


def run_short_steps(run_dir: Path, seconds: float, steps: int = 4, name: str = "short") -> None:
    """A real run (JSONL tracker, no infrastructure metrics) whose steps last about ``seconds`` each."""
    from otel_bridge import Bridge

    with Bridge.from_config({"run": {"name": name, "dir": str(run_dir)}, "trackers": [{"type": "jsonl"}]}) as b:
        for step in range(steps):
            with b.step(step):
                time.sleep(seconds)


def test_doctor_warns_when_the_scrape_interval_is_long_against_the_steps(
    tmp_path: Path, prometheus: PrometheusServer
) -> None:
    runs = tmp_path / "runs"
    run = {"dir": str(runs), "name": "short"}
    config = promql_config(prometheus, [{"name": "vllm:num_requests_running"}], run=run)
    status, document = doctor_json(tmp_path, config)
    assert status == 0
    boundaries = check_named(document, "step boundaries")
    assert boundaries["status"] == "pass"
    assert "no run in" in boundaries["detail"]

    run_short_steps(runs, 0.2)  # Prometheus scrapes every 1 s: five steps per scrape interval
    status, document = doctor_json(tmp_path, config)
    assert status == 0  # a warning, not a failure
    boundaries = check_named(document, "step boundaries")
    assert boundaries["status"] == "warn", boundaries
    assert "scrapes every 1s" in boundaries["detail"]
    assert "otel_bridge/boundary_lag_s" in boundaries["detail"]
    # issue 26: the advice does not suggest the setting in use (auto is the default)
    assert "auto or scrape" not in boundaries["fix"]
    assert "set prometheus.boundary: scrape" in boundaries["fix"]
    on_samples = {**config, "prometheus": {**config["prometheus"], "boundary": "samples"}}
    status, document = doctor_json(tmp_path, on_samples)
    assert "prometheus.boundary: auto or scrape" in check_named(document, "step boundaries")["fix"]

    forced = {**config, "prometheus": {**config["prometheus"], "boundary": "scrape"}}
    status, document = doctor_json(tmp_path, forced)
    assert check_named(document, "step boundaries")["status"] == "pass"


def test_doctor_checks_an_otlp_entry_with_a_utf8_name(
    tmp_path: Path, prometheus: PrometheusServer, prometheus_version: str
) -> None:
    """An ``otlp:`` entry under a UTF-8 translation strategy names ``trainer.tokens_total`` as Prometheus 3 stores it:
    doctor asks for it quoted, and says it has no series yet (the trainer has not pushed), rather than failing on the
    dot; on 2.42, which cannot hold such a name, doctor says so as the bridge's start-up would, with what to change."""
    entry = {
        "otlp": {
            "name": "trainer.tokens",
            "unit": "{token}",
            "instrument": "counter",
            "translation_strategy": "NoUTF8EscapingWithSuffixes",
        },
        "alias": "tokens",
    }
    status, document = doctor_json(tmp_path, promql_config(prometheus, [entry]))
    check = check_named(document, "metric tokens")
    assert check["status"] == "fail", check
    if prometheus_version == "2.42":
        assert "Prometheus 2.42.0+ds has no UTF-8 metric names" in check["detail"], check
        assert "metrics[0].otlp.translation_strategy" in check["detail"], check
    else:
        assert check["detail"] == "no series for trainer.tokens_total", check
    assert status == 1


def test_doctor_judges_the_step_lengths_of_the_configs_own_run(tmp_path: Path, prometheus: PrometheusServer) -> None:
    """Issue 26: with run.name set, doctor judges that run, not the newest run in run.dir (the demo's)."""
    runs = tmp_path / "runs"
    run_short_steps(runs, 0.2)  # "short": 0.2 s steps, five a scrape interval
    (runs / "mine").mkdir()
    records = [{"step": s, "time": 100.0 + 10 * s, "window_start": 90.0 + 10 * s} for s in range(4)]  # 10 s steps
    (runs / "mine" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    os.utime(runs / "mine" / "metrics.jsonl", (1_000_000, 1_000_000))  # the short run is the newest
    config = promql_config(prometheus, [{"name": "vllm:num_requests_running"}], run={"dir": str(runs), "name": "mine"})
    _, document = doctor_json(tmp_path, config)
    boundaries = check_named(document, "step boundaries")
    assert boundaries["status"] == "pass", boundaries
    assert f"the steps of {runs / 'mine'} last 10s" in boundaries["detail"]


def test_doctor_without_run_name_judges_a_run_of_the_config_not_the_demos(
    tmp_path: Path, prometheus: PrometheusServer
) -> None:
    """Issue 36: a config without run.name (what init writes) is judged by its own runs (otel-bridge-<time>), not
    by the newest run in run.dir, which here is the demo's with short steps."""
    runs = tmp_path / "runs"
    run_short_steps(runs, 0.2, name="demo-20260101-000000")  # what `make demo` leaves in runs/
    config = promql_config(prometheus, [{"name": "vllm:num_requests_running"}], run={"dir": str(runs)})
    _, document = doctor_json(tmp_path, config)
    boundaries = check_named(document, "step boundaries")
    assert boundaries["status"] == "pass", boundaries
    assert "demo-" not in boundaries["detail"], boundaries
    assert f"no run in {runs} named otel-bridge-<time>" in boundaries["detail"], boundaries

    mine = runs / "otel-bridge-20260101-000001"
    mine.mkdir()
    records = [{"step": s, "time": 100.0 + 10 * s, "window_start": 90.0 + 10 * s} for s in range(4)]  # 10 s steps
    (mine / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    os.utime(mine / "metrics.jsonl", (1_000_000, 1_000_000))  # the demo's run stays the newest
    _, document = doctor_json(tmp_path, config)
    boundaries = check_named(document, "step boundaries")
    assert boundaries["status"] == "pass", boundaries
    assert f"the steps of {mine} last 10s" in boundaries["detail"], boundaries


def test_doctor_warns_when_the_stores_exact_increase_disagrees_with_its_samples(tmp_path: Path) -> None:
    """A real Prometheus 3.16 behind a gateway that halves its ``anchored`` increases (issue 37 finding 4): the query
    plan check cross-checks the last few scrape intervals as a run checks its first windows, and says both figures."""
    name = "vllm:generation_tokens_total"
    page = CountingServer(name)
    store = RewrittenIncreases(lambda value: repr(float(value) / 2))
    with lying_prometheus(tmp_path, page, name, store, [{"name": name, "type": "counter"}]) as config:
        page.wait_for_scrapes(page.scrapes + 12)  # three seconds of samples: the window doctor checks
        status, document = doctor_json(tmp_path, config)
    plan = check_named(document, "query plan")
    assert plan["status"] == "warn", plan
    assert "disagrees with its own samples" in plan["detail"], plan
    assert f"{name}{{}}: exact increase" in plan["detail"], plan
    assert store.lies >= 1
    assert status == 0, document
