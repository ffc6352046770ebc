"""A trainer key wandb cannot declare does not cost the run its records (issue 37 finding 7).

Before: trainer keys with ``*`` before their end (``a*b``, ``*b``) made wandb 0.31 refuse every record
(``define_metric`` refuses the escaped key: "glob suffixes only"): 0 of 3 delivered. Now wandb receives such a key
renamed (``a_b``) and the record's notes say so, as for every key a tracker cannot take (docs/configuration.md). The
real wandb, offline, read back from its transaction log.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from otel_bridge import Bridge
from tests.helpers.imported_when_used import ImportedWhenUsed
from tests.helpers.offline import block_network
from tests.helpers.wandb_reader import read_history

wandb = ImportedWhenUsed("wandb")

KEYS = {"a*b": "a_b", "*b*c": "b_c", "x*": "x*", "loss": "loss"}


def test_keys_with_a_glob_before_their_end_reach_wandb_renamed_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    block_network(monkeypatch)
    for name, value in {"WANDB_SILENT": "true", "WANDB_CONSOLE": "off", "WANDB_DISABLE_GIT": "true"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    config = {
        "trackers": [{"type": "jsonl"}, {"type": "wandb", "mode": "offline", "project": "globs"}],
        "run": {"dir": str(tmp_path), "name": "globs"},
    }
    with Bridge.from_config(config) as bridge:
        for step in range(3):
            bridge.log({key: float(step) for key in KEYS}, step=step)
        report = bridge.close()
    assert report.complete, report
    run_dir = tmp_path / "globs"
    rows = [row for row in read_history(run_dir / "wandb") if "loss" in row]
    assert [row["loss"] for row in rows] == [0.0, 1.0, 2.0]  # 3 of 3 delivered
    for row in rows:
        assert {name: row[name] for name in KEYS.values()} == {name: row["loss"] for name in KEYS.values()}
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    for record in records:
        assert set(KEYS) <= set(record)  # the record itself keeps the trainer's keys
        notes = " ".join(record["_notes"])
        assert "'a*b' as 'a_b'" in notes, notes
        assert "'*b*c' as 'b_c'" in notes, notes  # and no leading '_', which wandb keeps for itself
        assert "'x*'" not in notes, notes
