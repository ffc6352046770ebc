"""A run's own directory (otel_bridge/pipeline/run_dir.py): a re-run of a name gets ``<name>-N``, a resumed run
(``run.resume``) continues its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from otel_bridge import Bridge
from otel_bridge.config import BridgeConfig
from otel_bridge.errors import ConfigError
from otel_bridge.pipeline.run_dir import own_run_dir


def run_config(tmp_path: Path, **run: object) -> BridgeConfig:
    return BridgeConfig.from_dict({"run": {"dir": str(tmp_path), **run}})


def test_a_rerun_gets_a_directory_of_its_own_and_a_resumed_run_continues_its_own(tmp_path: Path) -> None:
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "metrics.jsonl").write_text('{"step": 0}\n')
    assert own_run_dir(run_config(tmp_path, name="r1").run) == tmp_path / "r1-2"
    assert own_run_dir(run_config(tmp_path, name="r1", resume=True).run) == tmp_path / "r1"
    assert own_run_dir(run_config(tmp_path, name="new", resume=True).run) == tmp_path / "new"  # nothing to continue yet


def test_resume_without_a_run_name_is_a_config_error_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"run\.name"):
        run_config(tmp_path, resume=True)


def test_a_resumed_run_continues_its_jsonl_and_tensorboard_event_files(tmp_path: Path) -> None:
    """A trainer preempted after step 2 and resumed from its checkpoint: one run, steps 0..4 in its JSONL, its
    TensorBoard directory holding both processes' event files (TensorBoard shows them as the one run)."""
    config = {
        "run": {"dir": str(tmp_path), "name": "job", "resume": True},
        "trackers": [{"type": "jsonl"}, {"type": "tensorboard"}],
    }
    for steps in (range(0, 3), range(3, 5)):
        with Bridge.from_config(config) as bridge:
            for step in steps:
                bridge.log({"actor/loss": float(step)}, step=step)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job"]
    lines = (tmp_path / "job" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 1, 2, 3, 4]
    assert len(list((tmp_path / "job" / "tensorboard").glob("events.out.tfevents.*"))) == 2
