"""The framework integrations end to end: each example's loop runs for a few steps against simulated vLLM servers,
then the trackers are read back (JSONL lines, TensorBoard events, hparams.json). Plus the adapters' edge cases:
backend names, run naming, ranks, values logged for a step already recorded.

The Hugging Face and Lightning tests are skipped when transformers / lightning are not installed.
"""

from __future__ import annotations

import importlib
import itertools
import json
import logging
import math
import sys
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from otel_bridge import Bridge, ConfigError
from otel_bridge.exporters.backends.base import BACKENDS
from otel_bridge.exporters.record import StepRecord
from otel_bridge.exporters.tracker import FIRST_STEP_NOTE
from otel_bridge.integrations import HPARAMS_FILE, numeric_items, save_hyperparameters
from otel_bridge.integrations.verl import Tracking, patch_verl, supported_backends, verl_trackers

STEPS = 3
GAUGE_KEY = "rollout/vllm/num_requests_running/last"
"""A gauge statistic: in every record, the first one included."""
COUNTER_KEY = "rollout/vllm/generation_tokens_total/delta"
"""A counter statistic: in every record that has a window start."""


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def read_tensorboard(logdir: Path) -> dict[str, dict[int, float]]:
    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: {event.step: event.value for event in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def check_records(lines: list[dict[str, Any]], steps: list[int], trainer_keys: list[str]) -> None:
    """One line per step, in order; each window starts where the previous one ended; trainer and infra keys."""
    assert [line["step"] for line in lines] == steps
    assert lines[0]["window_start"] is None
    assert lines[0]["_notes"] == [FIRST_STEP_NOTE]
    for previous, line in itertools.pairwise(lines):
        assert line["window_start"] == previous["time"], "log-driven windows are contiguous"
        assert "_notes" not in line
        assert COUNTER_KEY in line, f"step {line['step']} lacks the counter statistics of its window"
    for line in lines:
        assert GAUGE_KEY in line
    for line in lines[1:]:
        missing = [key for key in trainer_keys if key not in line]
        assert not missing, f"step {line['step']} lacks trainer keys {missing}"


def check_tensorboard(logdir: Path, lines: list[dict[str, Any]], keys: list[str]) -> None:
    """TensorBoard holds the same values as the JSONL lines, at the same steps (as 32-bit floats)."""
    scalars = read_tensorboard(logdir)
    for key in keys:
        expected = {line["step"]: line[key] for line in lines if key in line}
        assert set(scalars[key]) == set(expected), key
        for step, value in expected.items():
            assert math.isclose(scalars[key][step], value, rel_tol=1e-6, abs_tol=1e-6), (key, step)


class MemoryBackend:
    """Keeps the records it is given."""

    def __init__(self) -> None:
        self.name = "memory"
        self.records: list[StepRecord] = []

    def write(self, record: StepRecord) -> None:
        self.records.append(record)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def trainer_values(record: StepRecord) -> dict[str, float]:
    """A record's values without the bridge's own health keys."""
    return {key: value for key, value in record.values.items() if not key.startswith("otel_bridge/")}


def memory_bridge(tmp_path: Path, **config: Any) -> tuple[Bridge, MemoryBackend]:
    backend = MemoryBackend()
    bridge = Bridge.from_config(
        {"trackers": [], "run": {"name": "t", "dir": str(tmp_path)}, **config}, backends=[backend]
    )
    return bridge, backend


# -- verl ------------------------------------------------------------------------------------------------------------


def test_verl_example_records_in_jsonl_tensorboard_and_hparams(tmp_path: Path) -> None:
    from examples.verl_tracking import main

    run_dir = main(tmp_path, STEPS)

    assert run_dir == tmp_path / "verl-ppo"
    lines = read_jsonl(run_dir / "metrics.jsonl")
    check_records(lines, list(range(STEPS + 1)), ["actor/pg_loss", "critic/score/mean", "timing_s/gen"])
    assert lines[0]["val-core/gsm8k/reward/mean_1"] == 0.1, "verl's validation before training is step 0"
    check_tensorboard(run_dir / "tensorboard", lines, ["actor/pg_loss", "critic/score/mean", COUNTER_KEY, GAUGE_KEY])
    hparams = json.loads((run_dir / HPARAMS_FILE).read_text(encoding="utf-8"))
    assert hparams["algorithm"]["adv_estimator"] == "grpo"


def test_verl_backend_names_map_to_trackers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert {"console", "tensorboard", "jsonl"} <= set(supported_backends())
    with pytest.raises(ConfigError, match=r"'swanlab': verl backend with no otel-bridge tracker; supported: .*console"):
        verl_trackers(["console", "swanlab"], "p", "e")
    with pytest.raises(ConfigError, match=r"'nope': unknown backend; supported: "):
        Tracking("p", "e", default_backend="nope", bridge_config={"run": {"dir": str(tmp_path)}})

    created: list[Mapping[str, Any]] = []

    def fake_factory(options: Mapping[str, Any], run_dir: Path) -> MemoryBackend:
        created.append(options)
        return MemoryBackend()

    for kind in ("wandb", "mlflow"):
        monkeypatch.setitem(BACKENDS, kind, fake_factory)
    monkeypatch.setenv("TENSORBOARD_DIR", "tb-here")
    trackers = verl_trackers(["wandb", "tracking", "mlflow", "tensorboard"], "proj", "exp", {"lr": 0.1, "p": Path("x")})
    assert [(t.type, t.options()) for t in trackers] == [
        ("wandb", {"project": "proj", "name": "exp", "config": {"lr": 0.1, "p": "x"}}),
        ("mlflow", {"experiment": "proj", "run_name": "exp"}),
        ("tensorboard", {"logdir": str(Path("tb-here").absolute())}),
    ]


def test_verl_run_naming_and_explicit_trackers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    with Tracking("my project", "exp/1", ["jsonl", "console"], bridge_config={"trackers": [{"type": "jsonl"}]}) as t:
        assert t.run_dir == Path("runs") / "my-project" / "exp-1"
        assert list(t.logger) == ["jsonl", "console"], "bridge-config trackers first, each kind once"
        t.log({"actor/loss": 1.0, "table": "not a number"}, step=1)
        assert t.bridge.collect(1)["actor/loss"] == 1.0
    with Tracking("p", "e", "jsonl", bridge_config={"run": {"name": "mine", "dir": str(tmp_path / "d")}}) as t:
        assert t.run_dir == tmp_path / "d" / "mine"


def test_verl_on_a_non_delivering_rank_writes_nothing(tmp_path: Path) -> None:
    config = {"otel": {"rank": 1}, "run": {"dir": str(tmp_path)}}
    with Tracking("p", "e", ["jsonl", "tensorboard"], config={"lr": 1}, bridge_config=config) as tracking:
        assert not tracking.bridge.delivers
        assert tracking.logger == {}
        tracking.log({"actor/loss": 1.0}, step=1)
    assert not (tmp_path / "e").exists()


def test_patch_verl_replaces_tracking_until_restored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = types.ModuleType("fake_verl_tracking")

    class VerlTracking:
        pass

    fake.Tracking = VerlTracking
    monkeypatch.setitem(sys.modules, "fake_verl_tracking", fake)
    restore = patch_verl({"run": {"dir": str(tmp_path)}}, module="fake_verl_tracking")
    try:
        from fake_verl_tracking import Tracking as Patched

        logger = Patched(project_name="p", experiment_name="e", default_backend="jsonl", config={"trainer": {}})
        assert isinstance(logger, Tracking)
        logger.log(data={"actor/loss": 0.5}, step=1)
        logger.finish()
    finally:
        restore()
    assert fake.Tracking is VerlTracking
    assert [line["actor/loss"] for line in read_jsonl(tmp_path / "e" / "metrics.jsonl")] == [0.5]
    with pytest.raises(ConfigError, match="needs verl"):
        patch_verl(module="no_such_module_for_otel_bridge")


# -- shared helpers --------------------------------------------------------------------------------------------------


def test_numeric_items_and_hyperparameters(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    kept, skipped = numeric_items({"a": 1, "b": 2.5, "c": np.float32(3), "d": "x", "e": True, "f": [1], "g": None})
    assert kept == {"a": 1, "b": 2.5, "c": np.float32(3)}
    assert skipped == ["d", "e", "f", "g"]
    bridge, _ = memory_bridge(tmp_path)
    with bridge:
        path = save_hyperparameters(bridge, {"lr": 0.1, "nan": float("nan"), "dims": (1, 2)})
        save_hyperparameters(bridge, {"lr": 0.2})
    assert path is not None
    assert json.loads(path.read_text(encoding="utf-8")) == {"dims": [1, 2], "lr": 0.2, "nan": "nan"}


@pytest.mark.parametrize(
    ("module", "framework", "extra"),
    [("huggingface", "transformers", "huggingface"), ("lightning", "lightning", "lightning")],
)
def test_an_integration_without_its_framework_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, framework: str, extra: str
) -> None:
    monkeypatch.delitem(sys.modules, f"otel_bridge.integrations.{module}", raising=False)
    monkeypatch.setitem(sys.modules, framework, None)  # what `import framework` sees when it is not installed
    with pytest.raises(ConfigError, match=rf"pip install 'otel-bridge\[{extra}\]'"):
        importlib.import_module(f"otel_bridge.integrations.{module}")


# -- Hugging Face ----------------------------------------------------------------------------------------------------


def test_hf_example_records_in_jsonl_and_hparams(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from examples.hf_trainer import main

    run_dir = main(tmp_path, STEPS)

    lines = read_jsonl(run_dir / "metrics.jsonl")
    check_records(lines, list(range(STEPS + 1)), ["train/loss", "train/grad_norm", "train/learning_rate"])
    assert "train/train_runtime" in lines[-1], "the Trainer's closing log joins the last step's record"
    check_tensorboard(run_dir / "tensorboard", lines, ["train/loss", COUNTER_KEY])
    hparams = json.loads((run_dir / HPARAMS_FILE).read_text(encoding="utf-8"))
    assert hparams["max_steps"] == STEPS


def hf_state(global_step: int, zero: bool = True) -> types.SimpleNamespace:
    return types.SimpleNamespace(global_step=global_step, is_world_process_zero=zero)


def test_hf_callback_records_ranks_and_late_values(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("transformers")
    from otel_bridge.integrations.huggingface import OtelBridgeCallback

    args = types.SimpleNamespace(to_dict=lambda: {"lr": 0.1})
    bridge, memory = memory_bridge(tmp_path)
    with bridge:
        other_rank = OtelBridgeCallback(bridge)
        for event in ("on_train_begin", "on_step_begin", "on_step_end", "on_train_end"):
            getattr(other_rank, event)(args, hf_state(1, zero=False), None)
        other_rank.on_log(args, hf_state(1, zero=False), None, logs={"loss": 1.0})
        assert other_rank.pending_step is None

        callback = OtelBridgeCallback(bridge)
        callback.on_train_begin(args, hf_state(0), None)
        callback.on_log(args, hf_state(0), None, logs={"eval_loss": 3.0})  # eval_on_start
        callback.on_step_begin(args, hf_state(0), None)
        callback.on_step_end(args, hf_state(1), None)
        callback.on_log(args, hf_state(1), None, logs={"loss": 2.0, "test_acc": 0.5, "note": "text"})
        callback.on_step_begin(args, hf_state(1), None)
        with caplog.at_level(logging.WARNING, logger="otel_bridge.integrations.huggingface"):
            callback.on_log(args, hf_state(1), None, logs={"eval_loss": 1.5})
        callback.on_train_end(args, hf_state(1), None)
    assert [(r.step, trainer_values(r)) for r in memory.records] == [
        (0, {"eval/loss": 3.0}),
        (1, {"train/loss": 2.0, "test/acc": 0.5}),
    ]
    assert "after its record was delivered" in caplog.text
    assert json.loads((bridge.run_dir / HPARAMS_FILE).read_text(encoding="utf-8")) == {"lr": 0.1}


# -- Lightning -------------------------------------------------------------------------------------------------------


def test_lightning_example_records_in_jsonl_tensorboard_and_hparams(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    from examples.lightning_logger import main

    run_dir = main(tmp_path, STEPS)

    assert run_dir == tmp_path / "lightning"
    lines = read_jsonl(run_dir / "metrics.jsonl")
    check_records(lines, list(range(STEPS)), ["train/loss", "train/batch_size"])
    check_tensorboard(run_dir / "tensorboard", lines, ["train/loss", COUNTER_KEY])
    assert json.loads((run_dir / HPARAMS_FILE).read_text(encoding="utf-8")) == {"hidden": 32, "lr": 0.01}


def test_lightning_logger_ownership_ranks_and_late_values(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("lightning")
    from lightning.pytorch.utilities import rank_zero_only

    from otel_bridge.integrations.lightning import OtelBridgeLogger

    bridge, memory = memory_bridge(tmp_path)
    with bridge:
        logger = OtelBridgeLogger(bridge)
        assert (logger.name, logger.version, logger.save_dir) == ("t", "", str(tmp_path))
        logger.log_metrics({"loss": 1.0, "epoch": 0}, step=0)
        with caplog.at_level(logging.WARNING, logger="otel_bridge.integrations.lightning"):
            logger.log_metrics({"val_loss": 2.0}, step=0)
        logger.log_metrics({"loss": 0.5}, step=None)
        logger.finalize("success")
        bridge.collect(1)
        assert repr(bridge).endswith("closed=False)"), "a Bridge passed in belongs to the caller"
    assert [(r.step, trainer_values(r)) for r in memory.records] == [
        (0, {"loss": 1.0, "epoch": 0.0}),
        (1, {"loss": 0.5}),
    ]
    assert "['val_loss'] for step 0 after step 0 was recorded" in caplog.text

    owned = OtelBridgeLogger({"trackers": [{"type": "jsonl"}], "run": {"dir": str(tmp_path / "owned")}})
    assert owned.name.startswith("otel-bridge-")
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    owned.log_hyperparams({"lr": 1})
    owned.log_metrics({"loss": 1.0}, step=0)
    owned.finalize("success")
    assert not (tmp_path / "owned").exists(), "ranks other than 0 create no Bridge"
    monkeypatch.setattr(rank_zero_only, "rank", 0)
    owned.log_metrics({"loss": 1.0}, step=0)
    owned.finalize("success")
    assert read_jsonl(Path(owned.log_dir) / "metrics.jsonl")[0]["loss"] == 1.0
