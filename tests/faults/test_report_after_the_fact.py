"""The delivery report reflects what a backend's storage holds when that can be checked after the fact (issue 14
point 8). The JSONL backend re-reads its file at close: a file cut short after the records were written (a full disk
losing data, another process truncating it) makes the report incomplete and names the steps, where before it said
every record was delivered. Backends whose storage cannot be read back this way are listed in
docs/failure-behaviour.md."""

from __future__ import annotations

import os
from pathlib import Path

from otel_bridge import Bridge
from tests.faults.support import base_config


def test_a_jsonl_file_cut_short_after_the_writes_makes_the_report_incomplete(tmp_path: Path) -> None:
    bridge = Bridge.from_config(base_config(tmp_path, "cut"))
    for step in range(6):
        with bridge.step(step):
            bridge.log({"actor/loss": float(step)}, step=step)
    bridge.collect(5)
    assert bridge.meter_provider.force_flush()
    path = tmp_path / "cut" / "metrics.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    os.truncate(path, sum(len(line) for line in lines[:3]) + 5)  # steps 3-5 gone, a broken line left
    report = bridge.close()
    assert not report.complete
    (status,) = report.backends
    assert status.delivered == 6
    assert any("does not hold 3 step(s)" in p and p.endswith(": 3, 4, 5") for p in status.problems), status
    assert any("1 line(s) that are not JSON" in p for p in status.problems), status


def test_an_intact_jsonl_file_keeps_the_report_complete(tmp_path: Path) -> None:
    path = tmp_path / "resumed" / "metrics.jsonl"
    path.parent.mkdir()
    path.write_text('{"step": 0, "time": 1.0, "window_start": null}\n')  # a resumed run: earlier lines are not checked
    bridge = Bridge.from_config(base_config(tmp_path, "resumed"))
    for step in range(1, 4):
        bridge.log({"actor/loss": float(step)}, step=step)
    report = bridge.close()
    assert report.complete, report
