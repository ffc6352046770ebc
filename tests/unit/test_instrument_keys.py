"""Issue 16 point 13: dotted instrument names are `/` groups in every tracker, and the console shows what matters.

Each tracker's own files are read back: TensorBoard's event files, wandb's offline transaction log, the JSONL file,
and the console's lines.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from otel_bridge import Bridge
from otel_bridge.exporters.backends.console import format_record
from otel_bridge.exporters.naming import instrument_key
from otel_bridge.exporters.record import StepRecord
from tests.helpers.offline import block_network
from tests.helpers.wandb_reader import read_history

STEPS = 3
INSTRUMENT_KEYS = {
    "trainer/tokens",
    "trainer/update_seconds/count",
    "trainer/update_seconds/sum",
    "trainer/update_seconds/mean",
    "trainer/update_seconds/min",
    "trainer/update_seconds/max",
}


def test_instrument_key_maps_dots_to_groups() -> None:
    assert instrument_key("trainer.update_seconds") == "trainer/update_seconds"
    assert instrument_key("http.client.duration") == "http/client/duration"
    assert instrument_key("trainer..tokens.") == "trainer/tokens"  # no empty segment
    assert instrument_key("tokens") == "tokens"


def _tensorboard_scalars(logdir: Path) -> dict[str, dict[int, float]]:
    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: {event.step: event.value for event in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def test_dotted_instruments_are_one_section_in_every_tracker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    block_network(monkeypatch)
    config = {
        "trackers": [
            {"type": "jsonl"},
            {"type": "tensorboard"},
            {"type": "wandb", "mode": "offline", "project": "sections"},
            {"type": "console", "max_keys": 2},
        ],
        "run": {"dir": str(tmp_path), "name": "sections"},
    }
    with Bridge.from_config(config) as bridge:
        meter = bridge.meter("trainer")
        tokens = meter.create_counter("trainer.tokens")
        update = meter.create_histogram("trainer.update_seconds", unit="s")
        for step in range(STEPS):
            with bridge.step(step):
                tokens.add(100)
                update.record(0.25)
                update.record(0.75)
                bridge.log({"actor/loss": 1.0 / (step + 1), "val/test_score": 0.5, "critic.lr": 1e-5}, step=step)
    run_dir = tmp_path / "sections"

    # JSONL: the keys themselves
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(records) == STEPS
    for record in records:
        assert set(record) >= INSTRUMENT_KEYS, sorted(record)
        assert not [k for k in record if k.startswith("trainer.")]
        assert record["critic.lr"] == 1e-5  # a key the trainer logged is kept as given
    assert [r["trainer/tokens"] for r in records] == [100.0, 200.0, 300.0]
    assert records[-1]["trainer/update_seconds/mean"] == pytest.approx(0.5)

    # TensorBoard: the tags of the event files, one 'trainer' section (first segment) for both instruments
    scalars = _tensorboard_scalars(run_dir / "tensorboard")
    assert set(scalars) >= INSTRUMENT_KEYS, sorted(scalars)
    sections = {tag.split("/", 1)[0] for tag in scalars}
    assert not [s for s in sections if s.startswith("trainer.")], sections
    assert scalars["trainer/tokens"] == {0: 100.0, 1: 200.0, 2: 300.0}

    # wandb: the history rows of the offline run
    history = read_history(run_dir / "wandb")
    rows = [row for row in history if "trainer/tokens" in row]
    assert len(rows) == STEPS, history
    for row in rows:
        assert set(row) >= INSTRUMENT_KEYS, sorted(row)
        assert not [k for k in row if k.startswith("trainer.")]
    assert sorted(float(row["trainer/tokens"]) for row in rows) == [100.0, 200.0, 300.0]

    # console: every trainer key, at most max_keys others, health keys last in their own section
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert len(lines) == STEPS, lines
    last = lines[-1].split(" | ")
    assert last[0] == "step 2"
    shown = [part.split("=", 1)[0] for part in last[1:] if "=" in part and not part.startswith("health: ")]
    assert {"actor/loss", "val/test_score", "critic.lr", *INSTRUMENT_KEYS} <= set(shown)
    assert last[-1].startswith("health: "), last[-1]
    assert "otel_bridge/" not in lines[-1]  # shown under 'health:' without the prefix
    assert all(not part.startswith("health: ") for part in last[:-1])


def test_console_sections_and_order() -> None:
    values = {f"rollout/vllm/m{i}/max": float(i) for i in range(5)}
    values.update({f"phase/gen/rollout/vllm/m{i}/max": float(i) for i in range(2)})
    values.update({f"trainer/t{i}": float(i) for i in range(15)})
    values.update({"val/test_score": 0.75, "actor/loss": 0.3112345})
    values.update({"otel_bridge/missing_metrics": 0.0, "otel_bridge/query_errors": 2.0})
    record = StepRecord(step=12, values=values, time=1.0, window_start=0.0, notes=("n1",))
    line = format_record(record, max_keys=3)
    parts = line.split(" | ")
    trainer = sorted(k for k in values if not k.startswith(("rollout/", "phase/", "otel_bridge/")))
    assert parts[: 1 + len(trainer)] == ["step 12", *[f"{k}={values[k]:.4g}" for k in trainer]]
    assert "val/test_score=0.75" in parts  # every trainer key: none hides in '(+N more)'
    infra = parts[1 + len(trainer) :]
    assert infra == [
        "phase/gen/rollout/vllm/m0/max=0",
        "phase/gen/rollout/vllm/m1/max=1",
        "rollout/vllm/m0/max=0",
        "(+4 more)",
        "note: n1",
        "health: missing_metrics=0, query_errors=2",
    ]
    # another infra_prefix: its keys are the infrastructure section
    renamed = StepRecord(step=1, values={"infra/a": 1.0, "b": 2.0}, time=1.0, window_start=0.0)
    assert format_record(renamed, max_keys=1, infra_prefix="infra") == "step 1 | b=2 | infra/a=1"
