"""Issue 26: a key the trainer logs reaches every tracker that accepts it unchanged (verl's
``val-core/gsm8k/reward/mean@1`` stays ``mean@1`` in JSONL, TensorBoard and wandb); a tracker that cannot take a
character gets the documented rename (MLflow: ``@`` as ``_at_``, as verl's own MLflow logger writes it; wandb: no
leading ``_``), and the record's notes say so.

Each tracker's own storage is read back: the JSONL file, TensorBoard's event files, wandb's offline transaction log and
MLflow's SQLite store.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from otel_bridge import Bridge
from tests.helpers.imported_when_used import ImportedWhenUsed
from tests.helpers.mlflow_store import new_store
from tests.helpers.offline import block_network
from tests.helpers.wandb_reader import read_history

mlflow_tracking = ImportedWhenUsed("mlflow.tracking")
event_accumulator = ImportedWhenUsed("tensorboard.backend.event_processing.event_accumulator")

VERL_KEYS = (
    "val-core/gsm8k/reward/mean@1",  # verl's process_validation_metrics: <var>/mean@<n>
    "val-aux/gsm8k/score/best@4/mean",
    "response_length/clip_ratio",
)
MLFLOW_NAMES = {
    "val-core/gsm8k/reward/mean@1": "val-core/gsm8k/reward/mean_at_1",
    "val-aux/gsm8k/score/best@4/mean": "val-aux/gsm8k/score/best_at_4/mean",
    "response_length/clip_ratio": "response_length/clip_ratio",
}


def _tensorboard_tags(logdir: Path) -> set[str]:
    acc = event_accumulator.EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return set(acc.Tags()["scalars"])


def test_trainer_keys_reach_each_tracker_unchanged_or_renamed_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    block_network(monkeypatch)
    tracking_uri = new_store(tmp_path / "mlflow.db")
    config = {
        "trackers": [
            {"type": "jsonl"},
            {"type": "tensorboard"},
            {"type": "wandb", "mode": "offline", "project": "keys"},
            {"type": "mlflow", "tracking_uri": tracking_uri, "experiment": "keys"},
        ],
        "run": {"dir": str(tmp_path), "name": "keys"},
    }
    with Bridge.from_config(config) as bridge:
        mlflow_run = next(b for b in bridge.backends if b.name == "mlflow").run_id  # type: ignore[attr-defined]
        for step in range(2):
            bridge.log({key: 0.5 + step for key in VERL_KEYS} | {"_private": 1.0}, step=step)
    run_dir = tmp_path / "keys"

    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["step"] for r in records] == [0, 1]
    for record in records:
        assert set(VERL_KEYS) | {"_private"} <= set(record), sorted(record)
        notes = " ".join(record["_notes"])
        assert "mlflow receives" in notes
        assert "'val-core/gsm8k/reward/mean@1' as 'val-core/gsm8k/reward/mean_at_1'" in notes
        assert "wandb receives" in notes
        assert "'_private' as 'private'" in notes
        assert "response_length/clip_ratio" not in notes, "a key every tracker takes is not mentioned"

    assert set(VERL_KEYS) | {"_private"} <= _tensorboard_tags(run_dir / "tensorboard")

    rows = [row for row in read_history(run_dir / "wandb") if VERL_KEYS[0] in row]
    assert len(rows) == 2
    assert all(set(VERL_KEYS) | {"private"} <= set(row) for row in rows), rows

    client = mlflow_tracking.MlflowClient(tracking_uri=tracking_uri)
    logged = set(client.get_run(mlflow_run).data.metrics)
    assert set(MLFLOW_NAMES.values()) | {"_private"} <= logged, sorted(logged)
    assert not [name for name in logged if "@" in name]
    history = client.get_metric_history(mlflow_run, MLFLOW_NAMES[VERL_KEYS[0]])
    assert [(m.step, m.value) for m in history] == [(0, 0.5), (1, 1.5)]
