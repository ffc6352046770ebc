"""Issue 36, a user's second day: every command that reads a config finds the one ``init`` just wrote (or
``--config`` / ``$OTEL_BRIDGE_CONFIG``) and says which; a file's problems all at once, presets included, on one line
each, without escaped control characters; doctor's fixes say the right thing; the options are named as the user typed
them, and argparse's errors are one line. Each command runs as a user types it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.cli.support import check_named, run_cli, validate_doctor_json, write_config
from tests.conftest import Replica
from tests.helpers.http_servers import free_port

URL = "http://127.0.0.1:{port}"


def init(tmp_path: Path, *args: str) -> None:
    done = run_cli(["init", *args], cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def test_discover_finds_the_file_init_just_wrote(tmp_path: Path) -> None:
    url = URL.format(port=free_port())
    init(tmp_path, "--prometheus", url)
    done = run_cli(["discover"], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"prometheus: {url} (from config)" in done.stdout
    assert "otel-bridge: config: otel-bridge.yaml (found in the current directory)" in done.stderr


def test_discover_and_prometheus_rules_read_the_file_named_by_the_environment(tmp_path: Path) -> None:
    url = URL.format(port=free_port())
    (tmp_path / "elsewhere").mkdir()
    init(tmp_path / "elsewhere", "--prometheus", url, "--preset", "sglang")
    env = {"OTEL_BRIDGE_CONFIG": str(tmp_path / "elsewhere" / "otel-bridge.yaml")}
    done = run_cli(["discover"], cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"prometheus: {url} (from config)" in done.stdout
    assert "$OTEL_BRIDGE_CONFIG" in done.stderr
    rules = run_cli(["prometheus-rules", "rules.yml"], cwd=tmp_path, env=env)
    assert rules.returncode == 0, rules.stderr
    text = (tmp_path / "rules.yml").read_text(encoding="utf-8")
    assert "sglang:generation_tokens_total" in text
    assert "vllm:" not in text


def test_prometheus_rules_finds_the_file_init_just_wrote(tmp_path: Path) -> None:
    init(tmp_path, "--prometheus", URL.format(port=free_port()), "--preset", "sglang")
    done = run_cli(["prometheus-rules", "rules.yml"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "config: otel-bridge.yaml (found in the current directory)" in done.stderr
    assert "sglang:" in (tmp_path / "rules.yml").read_text(encoding="utf-8")


BROKEN = {
    "prometheus": {"url": "http://127.0.0.1:9", "scrape_intervall_s": 1},
    "metrics": [{"preset": "vlm"}, {"preset": "rey"}],
}


def test_a_files_problems_come_all_at_once_presets_included(tmp_path: Path) -> None:
    write_config(tmp_path / "otel-bridge.yaml", BROKEN)
    done = run_cli(["query", "up"], cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()[-1:]
    assert "(3 problems)" in line, line
    assert "did you mean 'prometheus.scrape_interval_s'" in line
    assert "unknown preset 'vlm'" in line
    assert "did you mean 'vllm'?" in line
    assert "unknown preset 'rey'" in line
    assert "did you mean 'ray'?" in line
    assert "\\x0a" not in done.stderr


def test_doctor_shows_every_problem_of_the_file_on_one_line_each(tmp_path: Path) -> None:
    path = write_config(tmp_path / "otel-bridge.yaml", BROKEN)
    done = run_cli(["doctor", "--config", str(path)], cwd=tmp_path)
    assert done.returncode == 1
    assert "\\x0a" not in done.stdout, done.stdout
    assert "did you mean 'vllm'?" in done.stdout
    fix = re.search(r"^    fix: (.*)$", done.stdout, re.M)
    assert fix, done.stdout
    assert "fix the config as the message says" not in fix[1], done.stdout
    as_json = run_cli(["doctor", "--config", str(path), "--json"], cwd=tmp_path)
    document = json.loads(as_json.stdout)
    validate_doctor_json(document)
    assert "did you mean 'ray'?" in check_named(document, "config")["detail"]


def test_doctor_on_a_missing_config_file_says_to_pass_one_that_exists(tmp_path: Path) -> None:
    done = run_cli(["doctor", "--config", "nowhere.yaml", "--json"], cwd=tmp_path)
    assert done.returncode == 1
    check = check_named(json.loads(done.stdout), "config")
    assert check["status"] == "fail"
    assert "--config" in check["fix"], check
    assert "otel-bridge init" in check["fix"], check


@pytest.mark.integration
def test_doctor_on_a_vllm_url_given_as_prometheus_url_says_what_to_set(tmp_path: Path) -> None:
    replica = Replica()
    try:
        path = write_config(tmp_path / "otel-bridge.yaml", {"prometheus": {"url": replica.url, "retries": 0}})
        done = run_cli(["doctor", "--config", str(path), "--json"], cwd=tmp_path)
    finally:
        replica.stop()
    check = check_named(json.loads(done.stdout), "prometheus")
    assert check["status"] == "fail", check
    assert not check["fix"].startswith("start Prometheus"), check
    assert "prometheus.url" in check["fix"], check
    assert "scrape.targets" in check["fix"], check


def test_prometheus_config_names_the_option_the_user_typed(tmp_path: Path) -> None:
    done = run_cli(["prometheus-config", "p.yml", "--rollout", "127.0.0.1"], cwd=tmp_path)
    assert done.returncode == 2
    assert "--rollout '127.0.0.1' is not 'host:port'" in done.stderr, done.stderr
    assert "rollout_targets" not in done.stderr
    trainer = run_cli(["prometheus-config", "p.yml", "--trainer", "x"], cwd=tmp_path)
    assert "--trainer 'x'" in trainer.stderr, trainer.stderr
    nothing = run_cli(["prometheus-config", "p.yml"], cwd=tmp_path)
    assert nothing.returncode == 2
    assert "--rollout" in nothing.stderr, nothing.stderr
    assert "rollout_targets" not in nothing.stderr, nothing.stderr
    assert not (tmp_path / "p.yml").exists()


@pytest.mark.parametrize(
    "args", [["query"], ["query", "up", "--window"], ["plot"], ["no-such-command"], ["doctor", "--nope"]]
)
def test_an_argument_error_is_one_line(tmp_path: Path, args: list[str]) -> None:
    """docs/cli.md: an error prints one line on stderr, ``otel-bridge: ...``, exit status 2, nothing before it."""
    done = run_cli(args, cwd=tmp_path)
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("otel-bridge"), lines
    assert "--help" in lines[0]
    assert not lines[0].startswith("usage:")


def test_init_writes_a_config_naming_every_preset(tmp_path: Path) -> None:
    init(tmp_path, "--scrape", "127.0.0.1:8000")
    text = (tmp_path / "otel-bridge.yaml").read_text(encoding="utf-8")
    assert "(vllm, sglang, ray, dcgm, amd, node)" in text
    assert yaml.safe_load(text)["metrics"] == [{"preset": "vllm"}]
