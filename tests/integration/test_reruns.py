"""Issue 36: a re-run never appends to an earlier run's files or tracker runs.

A verl run with the same project and experiment name, twice (five steps, then two), through otel-bridge's
``Tracking`` and a bridge config file that sets ``run.dir`` (as ``otel-bridge init``'s does), into every tracker kind
(jsonl, TensorBoard, wandb offline, MLflow on SQLite, trackio): each run gets its own directory
(``runs/<project>/<experiment>`` and ``.../<experiment>-2``: the same place with or without a config file) and its own
tracker run, and every tracker read back holds steps 0..4 in the first and 0..1 in the second, never
``[0, 1, 2, 3, 4, 0, 1]`` in one. A tracker path outside the run directory that already holds a run's records is
refused at start-up with what to change.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli.support import run_python
from tests.helpers.imported_when_used import skip_unless_installed
from tests.helpers.mlflow_store import new_store

pytestmark = pytest.mark.integration

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from otel_bridge.integrations.verl import Tracking

    config, steps = sys.argv[1] if sys.argv[1] != "-" else None, int(sys.argv[2])
    logger = Tracking(
        project_name="proj", experiment_name="exp",
        default_backend=["jsonl", "tensorboard", "wandb", "mlflow", "trackio"],
        bridge_config=config,
    )
    for step in range(steps):
        logger.log({"actor/loss": float(step)}, step=step)
    report = logger.finish()
    print(json.dumps({"run_dir": str(logger.run_dir.resolve()), "complete": report.complete}))
    """
)

READ_BACK = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from trackio.sqlite_storage import SQLiteStorage
    from tests.helpers.wandb_reader import read_history

    out = {"jsonl": {}, "tensorboard": {}, "wandb": {}, "mlflow": {}, "trackio": {}}
    for run_dir in map(Path, sys.argv[2:]):
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        out["jsonl"][run_dir.name] = [json.loads(line)["step"] for line in lines]
        acc = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
        acc.Reload()
        out["tensorboard"][run_dir.name] = [e.step for e in acc.Scalars("actor/loss")]
        history = read_history(run_dir / "wandb")
        out["wandb"][run_dir.name] = [row["_step"] for row in history if "actor/loss" in row]
    client = MlflowClient(tracking_uri=sys.argv[1])
    experiment = client.get_experiment_by_name("proj")
    for run in client.search_runs([experiment.experiment_id]):
        history = client.get_metric_history(run.info.run_id, "actor/loss")
        out["mlflow"][run.info.run_id] = sorted(m.step for m in history)
    for record in SQLiteStorage.get_run_records("proj"):
        logs = SQLiteStorage.get_logs("proj", run_id=record["id"])
        out["trackio"][record["id"]] = [row["step"] for row in logs if "actor/loss" in row]
    print(json.dumps(out))
    """
)


#: What the scripts import, once per test process (:func:`tests.cli.support.run_python`): the trackers that read their
#: environment when used, not when imported. Not trackio: it fixes its directory (TRACKIO_DIR) and Hugging Face Hub's
#: settings at import, so each script imports it under its own environment.
TRACKERS = (
    "otel_bridge.integrations.verl",
    "wandb",
    "wandb.sdk.launch",
    "mlflow.tracking",
    "mlflow.store.tracking.sqlalchemy_store",
    "tensorboard.backend.event_processing.event_accumulator",
    "tests.helpers.wandb_reader",
)


def run_script(code: str, args: list[str], cwd: Path, env: dict[str, str]) -> Any:
    done = run_python(code, args, cwd=cwd, env=env, preload=TRACKERS)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("with_file", [True, False], ids=["init-file", "no-file"])
def test_a_rerun_with_the_same_names_gets_its_own_directory_and_tracker_runs(tmp_path: Path, with_file: bool) -> None:
    skip_unless_installed("trackio", "mlflow", "wandb")
    env = {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "MLFLOW_TRACKING_URI": new_store(tmp_path / "mlflow.db"),
        "TRACKIO_DIR": str(tmp_path / "trackio"),
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    config = "-"
    if with_file:  # what otel-bridge init writes: run.dir set explicitly
        config = str(tmp_path / "otel-bridge.yaml")
        Path(config).write_text(yaml.safe_dump({"run": {"dir": "runs"}}), encoding="utf-8")
    first = run_script(SCRIPT, [config, "5"], tmp_path, env)
    second = run_script(SCRIPT, [config, "2"], tmp_path, env)
    assert first["complete"]
    assert second["complete"]
    assert first["run_dir"] == str(tmp_path / "runs" / "proj" / "exp"), "the same place with or without a file"
    assert second["run_dir"] == str(tmp_path / "runs" / "proj" / "exp-2")

    read = run_script(READ_BACK, [env["MLFLOW_TRACKING_URI"], first["run_dir"], second["run_dir"]], tmp_path, env)
    for kind in ("jsonl", "tensorboard", "wandb"):
        assert read[kind] == {"exp": [0, 1, 2, 3, 4], "exp-2": [0, 1]}, (kind, read[kind])
    for kind in ("mlflow", "trackio"):
        assert sorted(read[kind].values()) == [[0, 1], [0, 1, 2, 3, 4]], (kind, read[kind])


@pytest.mark.parametrize(
    ("tracker", "refusal"),
    [
        ({"type": "jsonl", "path": "shared.jsonl"}, "already holds an earlier run's records"),
        ({"type": "tensorboard", "logdir": "tb"}, "already holds an earlier run's event files"),
    ],
)
def test_a_tracker_path_holding_an_earlier_runs_records_is_refused(
    tmp_path: Path, tracker: dict[str, str], refusal: str
) -> None:
    from otel_bridge import Bridge
    from otel_bridge.errors import BackendError

    where = {key: str(tmp_path / value) for key, value in tracker.items() if key != "type"}  # outside the run dir
    config = {"run": {"dir": str(tmp_path / "runs")}, "trackers": [{**tracker, **where}]}
    with Bridge.from_config(config) as bridge:
        bridge.log({"actor/loss": 1.0}, step=0)
    before = sorted((p.name, p.stat().st_size) for p in tmp_path.rglob("*") if p.is_file())
    with pytest.raises(BackendError, match=refusal):
        Bridge.from_config(config)
    assert sorted((p.name, p.stat().st_size) for p in tmp_path.rglob("*") if p.is_file()) == before
