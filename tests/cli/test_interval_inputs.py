"""Intervals Prometheus cannot hold are a one-line error of the config writers (issue 37 finding 11).

Before: ``prometheus-config --interval inf`` ended in a 16-line traceback (``OverflowError``); ``--interval 1e300`` (and
``prometheus-rules --interval 1e300``) wrote an interval promtool rejects. Prometheus holds a duration as int64
nanoseconds (about 292 years); the longest it takes is written and checked by the real promtool.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from otel_bridge.prometheus.promql import MAX_DURATION_MS
from tests.cli.support import run_cli
from tests.helpers.prometheus_server import prometheus_binary

COMMANDS = {
    "prometheus-config": ["prometheus-config", "prometheus.yml", "--rollout", "127.0.0.1:8000"],
    "prometheus-rules": ["prometheus-rules", "rules.yml"],
}
PROMTOOL_CHECK = {"prometheus-config": ["check", "config"], "prometheus-rules": ["check", "rules"]}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("interval", ["inf", "-inf", "nan", "1e300", "9223372037", "0", "-5", "0.0001"])
def test_an_interval_prometheus_cannot_hold_is_one_line_naming_the_option(
    tmp_path: Path, command: str, interval: str
) -> None:
    done = run_cli([*COMMANDS[command], f"--interval={interval}"], cwd=tmp_path)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "--interval" in done.stderr
    assert not any(tmp_path.glob("*.yml")), "nothing is written"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_longest_interval_accepted_is_one_promtool_takes(tmp_path: Path, command: str) -> None:
    longest = str(MAX_DURATION_MS // 1000)
    done = run_cli([*COMMANDS[command], "--interval", longest], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    written = tmp_path / COMMANDS[command][1]
    checked = subprocess.run(
        [prometheus_binary(tool="promtool"), *PROMTOOL_CHECK[command], str(written)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
