"""A failed start-up creates no tracker run: no run directory, no JSONL file, no MLflow store, no wandb files.

Issue 16 point 5: the infrastructure (and every other start-up check) is checked before the trackers are created, and
a tracker that cannot be created takes back what the ones before it made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from otel_bridge import Bridge, ConfigError, PrometheusUnreachableError, ScrapeError
from tests.helpers.http_servers import free_port


def trackers(tmp_path: Path) -> list[dict[str, Any]]:
    return [
        {"type": "jsonl"},
        {"type": "tensorboard"},
        {"type": "wandb", "mode": "offline", "project": "p"},  # wandb's files would go under the run directory
        {"type": "mlflow", "tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "e"},
    ]


def assert_no_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "r"
    assert not run_dir.exists(), sorted(p.name for p in run_dir.rglob("*"))
    assert not (tmp_path / "mlflow.db").exists()  # the MLflow store was never opened, so it holds no empty run


def test_unreachable_prometheus_creates_no_tracker_run(tmp_path: Path) -> None:
    config = {
        "prometheus": {"url": f"http://127.0.0.1:{free_port()}", "retries": 0, "timeout_s": 2},
        "metrics": [{"name": "vllm:num_requests_running", "type": "gauge"}],
        "trackers": trackers(tmp_path),
        "run": {"name": "r", "dir": str(tmp_path / "runs")},
    }
    with pytest.raises(PrometheusUnreachableError):
        Bridge.from_config(config)
    assert_no_run(tmp_path)


def test_unreachable_scrape_target_creates_no_tracker_run(tmp_path: Path) -> None:
    config = {
        "scrape": {"targets": [f"127.0.0.1:{free_port()}"], "timeout_s": 2},
        "metrics": [{"preset": "vllm"}],
        "trackers": trackers(tmp_path),
        "run": {"name": "r", "dir": str(tmp_path / "runs")},
    }
    with pytest.raises(ScrapeError):
        Bridge.from_config(config)
    assert_no_run(tmp_path)


def test_a_bad_later_tracker_takes_back_the_earlier_ones(tmp_path: Path) -> None:
    config = {
        "trackers": [{"type": "jsonl"}, {"type": "tensorboard"}, {"type": "mlflow", "experimnt": "typo"}],
        "run": {"name": "r", "dir": str(tmp_path / "runs")},
    }
    with pytest.raises(ConfigError, match="experimnt"):
        Bridge.from_config(config)
    assert_no_run(tmp_path)


def test_an_existing_run_directory_is_kept(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text('{"step": 0, "time": 1.0, "window_start": null}\n', encoding="utf-8")
    config = {
        "trackers": [{"type": "jsonl"}, {"type": "mlflow", "experimnt": "typo"}],
        "run": {"name": "r", "dir": str(tmp_path / "runs")},
    }
    with pytest.raises(ConfigError):
        Bridge.from_config(config)
    assert (run_dir / "metrics.jsonl").read_text(encoding="utf-8").startswith('{"step": 0')
