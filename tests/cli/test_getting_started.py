"""Issue 16: from the demo to one's own stack with the CLI alone (points 1, 2, 3 and 6), run as subprocesses."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from otel_bridge.cli.init import starter_config
from otel_bridge.config import BridgeConfig
from otel_bridge.errors import ConfigError
from otel_bridge.tools.local_prometheus import find_prometheus_binary
from tests.cli.support import REPO, cli_env, run_cli, write_config
from tests.helpers.http_servers import free_port
from tests.helpers.prometheus_server import prometheus_binary

# -- point 1: a local PromQL stack in one command -------------------------------------------------------------------


def test_demo_prometheus_runs_the_promql_path_and_stops_what_it_started(tmp_path: Path) -> None:
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != venv_bin)
    done = run_cli(
        ["demo", "--prometheus", "--steps", "3", "--step-seconds", "0.5", "--run-name", "r"],
        cwd=tmp_path,
        env={"PROMETHEUS_BIN": prometheus_binary(), "PATH": path},  # as after `make demo`: .venv/bin not on PATH
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""
    started = re.search(
        r"^prometheus: (\S+) \(pid (\d+)\) at (http://127\.0\.0\.1:(\d+)), scraping .* every ([\d.]+)s$",
        done.stdout,
        re.M,
    )
    assert started, done.stdout
    pid, port, interval_s = int(started[2]), int(started[4]), float(started[5])
    assert f"stopped prometheus (pid {pid})" in done.stdout
    assert "stopped the simulated vLLM servers" in done.stdout
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the Prometheus it started is gone (and reaped: the demo waited for it)
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass

    lines = (tmp_path / "runs" / "r" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["step"] for r in records] == [0, 1, 2]
    for record in records:
        assert "otel_bridge/boundary_lag_s" in record  # only the PromQL path reports it
        assert record["otel_bridge/missing_metrics"] == 0.0
    assert sum(r["rollout/vllm/generation_tokens_total/delta"] for r in records) > 0
    # Each phase holds two of Prometheus' scrape intervals, so each phase's window holds a sample of every gauge even
    # when a scrape comes late (a phase shorter than the interval may hold none: a gap in the record and a warning).
    for record in records:
        for phase in ("gen", "update"):
            assert record[f"phase/{phase}/seconds"] >= 2 * interval_s, (phase, record, interval_s)
            assert f"phase/{phase}/rollout/vllm/kv_cache_usage_perc/max" in record, (phase, record)
            assert f"phase/{phase}/rollout/vllm/num_requests_running/max" in record, (phase, record)

    # issue 15 point 4: the demo's table shows what the rollout servers did in each phase
    for phase in ("gen", "update"):
        for key in ("generation_tokens_total/rate", "kv_cache_usage_perc/max"):
            row = re.search(rf"^phase/{phase}/rollout/vllm/{key} +(.+)$", done.stdout, re.M)
            assert row, done.stdout
            assert len(row[1].split()) == 3, row[0]  # one column per step

    # point 3: the printed TensorBoard hint runs as printed, from the same directory (--inspect reads the events)
    hint = re.search(r"^tensorboard: (.+)$", done.stdout, re.M)
    assert hint, done.stdout
    inspect = subprocess.run(
        [*shlex.split(hint[1]), "--inspect"],
        cwd=tmp_path,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert inspect.returncode == 0, inspect.stderr
    assert "rollout/vllm/generation_tokens_total/delta" in inspect.stdout
    assert "actor/loss" in inspect.stdout

    # point 3: the demo says how to reach the command line (here not on PATH: the virtualenv's script), runnable as
    # printed, and how to put it on PATH
    cli = re.search(r"^cli: (\S+) --help \(or: source (\S+), then otel-bridge --help\)$", done.stdout, re.M)
    assert cli, done.stdout
    assert (tmp_path / cli[1]).resolve() == Path(sys.executable).parent / "otel-bridge"
    assert (tmp_path / cli[2]).resolve() == Path(sys.executable).parent / "activate"
    helped = subprocess.run(
        [cli[1], "--help"], cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=60, check=False
    )
    assert helped.returncode == 0, helped.stderr
    assert "doctor" in helped.stdout


def test_demo_prometheus_without_a_binary_says_how_to_get_one(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-prometheus"
    done = run_cli(["demo", "--prometheus", "--steps", "1"], cwd=tmp_path, env={"PROMETHEUS_BIN": str(missing)})
    assert done.returncode == 2
    assert done.stdout == ""  # nothing was started
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"PROMETHEUS_BIN={missing} is not an executable file" in done.stderr
    assert "sudo apt-get install prometheus" in done.stderr
    assert not (tmp_path / "runs").exists()


def test_the_binary_lookup_names_every_place_it_looked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        find_prometheus_binary({"PATH": str(tmp_path)}, default=tmp_path / "usr-bin-prometheus")
    message = str(info.value)
    assert "PROMETHEUS_BIN is unset" in message
    assert str(tmp_path / "usr-bin-prometheus") in message
    assert "`prometheus` is not on PATH" in message
    assert "sudo apt-get install prometheus" in message

    binary = tmp_path / "prometheus"
    binary.write_text("#!/bin/sh\n", encoding="utf-8")
    binary.chmod(0o755)
    assert find_prometheus_binary({"PATH": str(tmp_path)}, default=tmp_path / "usr-bin-prometheus") == binary
    assert find_prometheus_binary({"PROMETHEUS_BIN": str(binary)}) == binary


# -- point 2: a starter config ----------------------------------------------------------------------------------------

EXAMPLE = REPO / "examples" / "otel-bridge.yaml"
EXAMPLE_ARGS = ["--scrape", "127.0.0.1:8000", "127.0.0.1:8001", "--tracker", "jsonl", "--tracker", "tensorboard"]


def test_init_writes_a_valid_config_for_each_path(tmp_path: Path) -> None:
    done = run_cli(["init", *EXAMPLE_ARGS], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "wrote otel-bridge.yaml"
    scrape = BridgeConfig.load(tmp_path / "otel-bridge.yaml", environ={})
    assert scrape.resolved_source() == "scrape"
    assert scrape.scrape_targets == ["http://127.0.0.1:8000/metrics", "http://127.0.0.1:8001/metrics"]
    assert [t.type for t in scrape.trackers] == ["jsonl", "tensorboard"]

    done = run_cli(["init", "promql.yaml", "--prometheus", "http://127.0.0.1:9090", "--tracker", "wandb"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    promql = BridgeConfig.load(tmp_path / "promql.yaml", environ={})
    assert promql.resolved_source() == "promql"
    assert promql.prometheus.url == "http://127.0.0.1:9090"
    assert [t.type for t in promql.trackers] == ["wandb"]
    assert promql.metrics[0].preset == "vllm"


def test_init_never_overwrites_without_force(tmp_path: Path) -> None:
    path = tmp_path / "otel-bridge.yaml"
    path.write_text("mine: true\n", encoding="utf-8")
    done = run_cli(["init", "--prometheus", "auto"], cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == "otel-bridge: otel-bridge.yaml exists; pass --force to overwrite it, or give another PATH\n"
    assert path.read_text(encoding="utf-8") == "mine: true\n"
    done = run_cli(["init", "--prometheus", "auto", "--force"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert BridgeConfig.load(path, environ={}).prometheus.url == "auto"


def test_init_refuses_a_bad_target_naming_the_key(tmp_path: Path) -> None:
    done = run_cli(["init", "--scrape", "localhost"], cwd=tmp_path)
    assert done.returncode == 2
    assert "scrape.targets" in done.stderr
    assert not (tmp_path / "otel-bridge.yaml").exists()


def test_the_shipped_example_is_init_output_and_shows_every_section() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    assert text == starter_config(
        scrape=["127.0.0.1:8000", "127.0.0.1:8001"], trackers=["jsonl", "tensorboard"], preset="vllm"
    ), "regenerate: otel-bridge init examples/otel-bridge.yaml --force " + " ".join(EXAMPLE_ARGS)
    BridgeConfig.from_dict(yaml.safe_load(text))
    for section in BridgeConfig.model_fields:
        assert re.search(rf"^(# )?{section}:", text, re.M), f"section {section!r} missing from {EXAMPLE}"
    for tracker in ("jsonl", "tensorboard", "console", "wandb", "mlflow", "trackio"):
        assert f"type: {tracker}" in text


# -- point 6: one error line, no urllib3 retry warnings before it -----------------------------------------------------


@pytest.mark.parametrize(
    "command", [["query", "vllm:num_requests_running"], ["tail", "--count", "1"], ["doctor", "--json"]]
)
def test_an_unreachable_prometheus_is_one_line(tmp_path: Path, command: list[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    config = write_config(
        tmp_path / "c.yaml",
        {"prometheus": {"url": url, "retries": 2, "backoff_s": 0.01}, "metrics": [{"preset": "vllm"}]},
    )
    done = run_cli([*command, "--config", str(config)], cwd=tmp_path)
    if command[0] == "doctor":  # doctor reports it as a failed check, and urllib3 stays quiet there too
        assert done.returncode == 1, done.stdout + done.stderr
        assert done.stderr == ""
        return
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"otel-bridge: cannot reach Prometheus at {url}/"), done.stderr
    assert "Retrying" not in done.stderr


def test_demo_prometheus_stops_its_prometheus_on_sigterm(tmp_path: Path) -> None:
    demo = subprocess.Popen(
        [sys.executable, "-m", "otel_bridge.cli", "demo", "--prometheus", "--steps", "100", "--run-name", "r"],
        cwd=tmp_path,
        env=cli_env({"PROMETHEUS_BIN": prometheus_binary()}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pid = None
    try:
        assert demo.stdout is not None
        for line in demo.stdout:
            started = re.match(r"prometheus: \S+ \(pid (\d+)\)", line)
            if started:
                pid = int(started[1])
                break
        assert pid is not None, demo.stderr.read() if demo.stderr else ""
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(timeout=60) == 143
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return  # stopped by the demo
    os.kill(pid, signal.SIGKILL)  # the Prometheus this test's demo started must not outlive the test
    pytest.fail(f"the demo left its Prometheus (pid {pid}) running after SIGTERM")
