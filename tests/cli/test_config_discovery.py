"""Issue 26: the commands find the config a user just wrote. ``doctor``, ``query`` and ``tail`` read
``./otel-bridge.yaml`` (what ``otel-bridge init`` writes) or ``$OTEL_BRIDGE_CONFIG`` when no ``--config`` is given,
and say which file they use; ``doctor`` with nothing configured does not say "all checks passed"; the doctor table
written to a file or a pipe keeps every detail whole."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.support import check_named, run_cli, validate_doctor_json, write_config
from tests.conftest import Replica


def test_tail_after_init_reads_the_written_config_without_flags(tmp_path: Path, replicas: list[Replica]) -> None:
    written = run_cli(["init", "--scrape", replicas[0].hostport], cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    assert (tmp_path / "otel-bridge.yaml").is_file()

    done = run_cli(["tail", "--count", "1", "--interval", "1s"], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "config: otel-bridge.yaml (found in the current directory)" in done.stderr
    assert "rollout/vllm/" in done.stdout


def test_doctor_reads_the_config_in_the_current_directory_and_says_so(tmp_path: Path) -> None:
    write_config(tmp_path / "otel-bridge.yaml", {"trackers": [{"type": "jsonl"}], "run": {"name": "here"}})
    done = run_cli(["doctor", "--json"], cwd=tmp_path)
    document = json.loads(done.stdout)
    validate_doctor_json(document)
    assert document["config"] == "otel-bridge.yaml"
    assert "otel-bridge.yaml (found in the current directory)" in check_named(document, "config")["detail"]


def test_otel_bridge_config_names_the_file_and_wins_over_the_current_directory(tmp_path: Path) -> None:
    write_config(tmp_path / "otel-bridge.yaml", {"trackers": [{"type": "jsonl"}]})
    elsewhere = write_config(tmp_path / "team.yaml", {"trackers": [{"type": "jsonl"}], "run": {"name": "team"}})
    done = run_cli(["doctor", "--json"], cwd=tmp_path, env={"OTEL_BRIDGE_CONFIG": str(elsewhere)})
    document = json.loads(done.stdout)
    assert document["config"] == str(elsewhere)
    assert "$OTEL_BRIDGE_CONFIG" in check_named(document, "config")["detail"]

    missing = run_cli(["doctor"], cwd=tmp_path, env={"OTEL_BRIDGE_CONFIG": str(tmp_path / "nope.yaml")})
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        f"otel-bridge: $OTEL_BRIDGE_CONFIG names {str(tmp_path / 'nope.yaml')!r}, which is not a file; "
        "fix or unset OTEL_BRIDGE_CONFIG"
    ]


def test_query_says_which_config_it_read(tmp_path: Path) -> None:
    write_config(tmp_path / "otel-bridge.yaml", {"prometheus": {"url": "http://127.0.0.1:9", "retries": 0}})
    done = run_cli(["query", "up"], cwd=tmp_path)
    assert "config: otel-bridge.yaml (found in the current directory)" in done.stderr
    assert "127.0.0.1:9" in done.stderr  # it used that file's Prometheus (down), not "no Prometheus to ask"


def test_doctor_with_nothing_configured_does_not_say_all_checks_passed(tmp_path: Path) -> None:
    done = run_cli(["doctor"], cwd=tmp_path)
    assert "all checks passed" not in done.stdout
    assert "nothing is configured" in done.stdout
    assert "otel-bridge init" in done.stdout


def test_doctor_table_in_a_file_keeps_details_whole(tmp_path: Path) -> None:
    long_dir = tmp_path / ("d" * 150)
    write_config(tmp_path / "otel-bridge.yaml", {"trackers": [{"type": "jsonl"}], "run": {"dir": str(long_dir)}})
    done = run_cli(["doctor"], cwd=tmp_path)
    assert "…" not in done.stdout
    run_dir_row = next(line for line in done.stdout.splitlines() if "run dir" in line and "PASS" in line)
    assert str(long_dir) in run_dir_row
