"""Issue 16 point 8: config mistakes are named where they are, with the key the user meant."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.support import check_named, run_cli, validate_doctor_json


def test_misspelt_keys_get_did_you_mean(tmp_path: Path) -> None:
    config = tmp_path / "otel-bridge.yaml"
    config.write_text(
        "promethues:\n  url: http://127.0.0.1:9090\nprometheus:\n  scrape_interval: 5\n"
        "trackers:\n  - {type: jsonl, pth: x.jsonl}\n",
        encoding="utf-8",
    )
    done = run_cli(["doctor", "--json", "--config", str(config)], cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)
    validate_doctor_json(document)
    detail = check_named(document, "config")["detail"]
    assert detail.startswith(f"invalid otel-bridge config file {config} (2 problems):"), detail
    assert "unknown key 'promethues'; allowed keys here: " in detail
    assert "did you mean 'prometheus'? (line 1)" in detail  # the line of the file the key is on
    assert "unknown key 'prometheus.scrape_interval'; " in detail
    assert "did you mean 'prometheus.scrape_interval_s'? (line 4)" in detail

    # a tracker's own options get the same help (they are validated when the tracker is built)
    config.write_text("trackers:\n  - {type: jsonl, pth: x.jsonl}\n", encoding="utf-8")
    done = run_cli(["doctor", "--json", "--config", str(config)], cwd=tmp_path)
    tracker = check_named(json.loads(done.stdout), "tracker jsonl")
    assert tracker["status"] == "fail"
    assert "unknown key 'pth'" in tracker["detail"]
    assert "did you mean 'path'?" in tracker["detail"]


def test_yaml_errors_name_the_file_and_line(tmp_path: Path) -> None:
    config = tmp_path / "broken.yaml"
    text = "prometheus:\n  url: http://127.0.0.1:9090\n  timeout_s: [5\nrun:\n  dir: runs\n"
    config.write_text(text, encoding="utf-8")
    done = run_cli(["query", "up", "--config", str(config)], cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr  # one line, as docs/cli.md promises
    assert lines[0].startswith(f"otel-bridge: config file {config} is not valid YAML: line "), lines[0]
    assert "(while parsing a flow sequence at line 3, column 14)" in lines[0]
    assert "<unicode string>" not in lines[0]


def test_out_of_range_ports_are_refused_at_config_time(tmp_path: Path) -> None:
    config = tmp_path / "ports.yaml"
    config.write_text(
        "prometheus:\n  url: http://localhost:80000\nscrape:\n  targets: [127.0.0.1:8000, localhost:80000]\n",
        encoding="utf-8",
    )
    done = run_cli(["doctor", "--json", "--config", str(config)], cwd=tmp_path)
    assert done.returncode == 1
    detail = check_named(json.loads(done.stdout), "config")["detail"]
    assert "prometheus.url = 'http://localhost:80000': the port must be a number from 1 to 65535 (line 2)" in detail
    assert "scrape.targets[1] = 'localhost:80000': the port must be a number from 1 to 65535 (line 4)" in detail

    # nothing is started: the same file is refused by a run before any connection is tried
    run_dir = tmp_path / "runs"
    done = run_cli(["tail", "--config", str(config), "--count", "1"], cwd=tmp_path)
    assert done.returncode == 2
    assert "the port must be a number from 1 to 65535" in done.stderr
    assert not run_dir.exists()
