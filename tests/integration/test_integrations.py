"""The framework integrations end to end: each example's loop runs for a few steps against simulated vLLM servers,
then the trackers are read back (JSONL lines, TensorBoard events, hparams.json). Plus the adapters' edge cases:
backend names, run naming, ranks, windows (Hugging Face: the step itself), values logged later for the same step
(they join its record) and for a step whose record was already sent (left out, warned, counted).

The Hugging Face and Lightning tests are skipped when transformers / lightning are not installed.
"""

from __future__ import annotations

import importlib
import itertools
import json
import logging
import math
import re
import subprocess
import sys
import time
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from otel_bridge import Bridge, ConfigError
from otel_bridge.errors import StepOrderError, install_hint
from otel_bridge.exporters.backends.registry import BACKENDS
from otel_bridge.exporters.record import StepRecord
from otel_bridge.exporters.tracker import FIRST_STEP_NOTE
from otel_bridge.integrations import HPARAMS_FILE, LATE_VALUES, numeric_items, save_hyperparameters
from otel_bridge.integrations.verl import Tracking, patch_verl, supported_backends, verl_trackers
from tests.helpers.backends import BackendDouble

WORKER_GROUP = "verl"  # imports verl and torch here: one worker does for every such module (tests/plugins/tiers.py)

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


def check_records(
    lines: list[dict[str, Any]], steps: list[int], trainer_keys: list[str], *, log_driven: bool = True
) -> None:
    """One line per step, in order, with trainer and infra keys. Log-driven windows (``log`` is the boundary) are
    contiguous and the first has no start; explicit windows (begin/end_step) all have a start, none before the
    previous window's end."""
    assert [line["step"] for line in lines] == steps
    if log_driven:
        assert lines[0]["window_start"] is None
        assert lines[0]["_notes"] == [FIRST_STEP_NOTE]
    else:
        assert all(line["window_start"] is not None for line in lines)
        assert "_notes" not in lines[0]
        assert COUNTER_KEY in lines[0]
    for line in lines:
        assert line["window_start"] is None or line["window_start"] <= line["time"]
    for previous, line in itertools.pairwise(lines):
        if log_driven:
            assert line["window_start"] == previous["time"], "log-driven windows are contiguous"
        else:
            assert line["window_start"] >= previous["time"], "explicit windows do not overlap"
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


def trainer_values(record: StepRecord) -> dict[str, float]:
    """A record's values without the bridge's own health keys."""
    return {key: value for key, value in record.values.items() if not key.startswith("otel_bridge/")}


def memory_bridge(tmp_path: Path, **config: Any) -> tuple[Bridge, BackendDouble]:
    backend = BackendDouble("memory")
    bridge = Bridge.from_config(
        {"trackers": [], "run": {"name": "t", "dir": str(tmp_path)}, **config}, backends=[backend]
    )
    return bridge, backend


# -- verl ------------------------------------------------------------------------------------------------------------


def test_verl_example_records_in_jsonl_tensorboard_and_hparams(tmp_path: Path) -> None:
    from examples.verl_tracking import main

    run_dir = main(tmp_path, STEPS)

    assert run_dir == tmp_path / "otel-bridge-examples" / "verl-ppo"  # <run.dir>/<project>/<experiment>
    lines = read_jsonl(run_dir / "metrics.jsonl")
    check_records(lines, list(range(STEPS + 1)), ["actor/pg_loss", "critic/score/mean", "timing_s/gen"])
    assert lines[0]["val-core/gsm8k/reward/mean@1"] == 0.1, "verl's validation before training is step 0"
    val_steps = [line["step"] for line in lines if "val-core/gsm8k/reward/mean@1" in line]
    assert val_steps == [0, 2, 3], "a second log() for a step (test_freq=2 and the last step) joins its record"
    check_tensorboard(
        run_dir / "tensorboard",
        lines,
        ["actor/pg_loss", "critic/score/mean", "val-core/gsm8k/reward/mean@1", COUNTER_KEY, GAUGE_KEY],
    )
    hparams = json.loads((run_dir / HPARAMS_FILE).read_text(encoding="utf-8"))
    assert hparams["algorithm"]["adv_estimator"] == "grpo"


def test_verl_two_logs_for_one_step_make_one_record(tmp_path: Path) -> None:
    bridge_config = {"run": {"name": "two", "dir": str(tmp_path)}}
    with Tracking("p", "e", ["jsonl", "tensorboard"], bridge_config=bridge_config) as tracking:
        tracking.log({"actor/loss": 1.0}, step=0)
        tracking.log({"actor/loss": 0.9, "critic/score": 0.2}, step=1)  # training metrics: step 1's boundary
        between = time.time()
        tracking.log({"val-core/acc": 0.5}, step=1)  # validation, logged apart: joins step 1's record
        tracking.log({"val-core/loss": 2.5, "actor/loss": 0.8}, step=1)  # a repeated key: the last value wins
        tracking.log({"actor/loss": 0.7}, step=2)
        with pytest.raises(StepOrderError, match="steps must increase"):
            tracking.log({"actor/loss": 0.6}, step=1)
        tracking.log({"val-core/acc": 0.6}, step=2)
    lines = read_jsonl(tmp_path / "p" / "two" / "metrics.jsonl")  # <run.dir>/<project>/<run.name>
    assert [line["step"] for line in lines] == [0, 1, 2]
    assert {k: v for k, v in lines[1].items() if not k.startswith(("otel_bridge/", "time", "window"))} == {
        "step": 1,
        "actor/loss": 0.8,
        "critic/score": 0.2,
        "val-core/acc": 0.5,
        "val-core/loss": 2.5,
    }
    assert lines[1]["window_start"] == lines[0]["time"]
    assert lines[1]["time"] <= between, "the window ends at the step's first log(), later ones only add values"
    assert lines[2]["window_start"] == lines[1]["time"]
    assert (lines[2]["actor/loss"], lines[2]["val-core/acc"]) == (0.7, 0.6)
    check_tensorboard(tmp_path / "p" / "two" / "tensorboard", lines, ["actor/loss", "critic/score", "val-core/acc"])


def test_verl_backend_names_map_to_trackers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert {"console", "tensorboard", "jsonl"} <= set(supported_backends())
    with pytest.raises(ConfigError, match=r"'swanlab': verl backend with no otel-bridge tracker; supported: .*console"):
        verl_trackers(["console", "swanlab"], "p", "e")
    with pytest.raises(ConfigError, match=r"'nope': unknown backend; supported: "):
        Tracking("p", "e", default_backend="nope", bridge_config={"run": {"dir": str(tmp_path)}})

    created: list[Mapping[str, Any]] = []

    def fake_factory(options: Mapping[str, Any], run_dir: Path) -> BackendDouble:
        created.append(options)
        return BackendDouble("memory")

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
        assert t.run_dir == tmp_path / "d" / "p" / "mine"  # the project's directory with or without a file


def test_verl_on_a_non_delivering_rank_writes_nothing(tmp_path: Path) -> None:
    config = {"otel": {"rank": 1}, "run": {"dir": str(tmp_path)}}
    with Tracking("p", "e", ["jsonl", "tensorboard"], config={"lr": 1}, bridge_config=config) as tracking:
        assert not tracking.bridge.delivers
        assert tracking.logger == {}
        tracking.log({"actor/loss": 1.0}, step=1)
    assert not (tmp_path / "p").exists()


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
    assert [line["actor/loss"] for line in read_jsonl(tmp_path / "p" / "e" / "metrics.jsonl")] == [0.5]
    with pytest.raises(ConfigError, match="needs verl"):
        patch_verl(module="no_such_module_for_otel_bridge")


def test_patch_verl_too_late_rebinds_and_warns(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 26: verl 0.9's v1 trainer binds Tracking when it is imported; a patch after that import rebinds it there
    and says so (a WARNING naming the module), instead of silently leaving verl's own Tracking in place."""
    fake = types.ModuleType("fake_verl_tracking")

    class VerlTracking:
        pass

    fake.Tracking = VerlTracking
    trainer = types.ModuleType("verl.fake_trainer_base")
    trainer.Tracking = VerlTracking  # `from verl.utils.tracking import Tracking` at import time
    monkeypatch.setitem(sys.modules, "fake_verl_tracking", fake)
    monkeypatch.setitem(sys.modules, "verl.fake_trainer_base", trainer)
    with caplog.at_level(logging.WARNING, logger="otel_bridge"):
        restore = patch_verl({"run": {"dir": str(tmp_path)}}, module="fake_verl_tracking", warn_unused=False)
    try:
        assert trainer.Tracking is fake.Tracking
        assert trainer.Tracking is not VerlTracking
        late = [r.getMessage() for r in caplog.records if "came after" in r.getMessage()]
        assert late == [
            "patch_verl() came after verl.fake_trainer_base imported verl's Tracking; rebound it there, but a "
            "Tracking already built keeps verl's own: patch before verl's trainer starts (docs/verl.md)"
        ]
    finally:
        restore()
    assert trainer.Tracking is VerlTracking


def test_patch_verl_in_a_process_where_verl_builds_no_tracking_warns_at_exit(tmp_path: Path) -> None:
    """Issue 26: the patch in the wrong process (the driver of ``python -m verl.trainer.main_ppo``, whose trainer runs
    in a Ray actor) is a WARNING when the process ends, naming the setup hook to use instead."""
    script = (
        "import sys, types\n"
        "fake = types.ModuleType('fake_verl_tracking'); fake.Tracking = object\n"
        "sys.modules['fake_verl_tracking'] = fake\n"
        "from otel_bridge.integrations.verl import patch_verl\n"
        f"patch_verl({{'run': {{'dir': {str(tmp_path)!r}}}}}, module='fake_verl_tracking')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "verl built no Tracking here" in done.stderr
    assert "otel_bridge.integrations.verl.setup" in done.stderr


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
    with pytest.raises(ConfigError, match=re.escape(install_hint(extra))):
        importlib.import_module(f"otel_bridge.integrations.{module}")


# -- Hugging Face ----------------------------------------------------------------------------------------------------


def test_hf_example_records_in_jsonl_and_hparams(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from examples.hf_trainer import main

    run_dir = main(tmp_path, STEPS)

    lines = read_jsonl(run_dir / "metrics.jsonl")
    check_records(
        lines, list(range(STEPS + 1)), ["train/loss", "train/grad_norm", "train/learning_rate"], log_driven=False
    )
    assert "train/loss" not in lines[0], "step 0 is the record of the start of training"
    assert [line["step"] for line in lines if "eval/loss" in line] == [STEPS], "evaluation joins its step's record"
    assert "train/train_runtime" in lines[-1], "the Trainer's closing log joins the last step's record"
    check_tensorboard(run_dir / "tensorboard", lines, ["train/loss", "eval/loss", COUNTER_KEY])
    hparams = json.loads((run_dir / HPARAMS_FILE).read_text(encoding="utf-8"))
    assert hparams["max_steps"] == STEPS


def hf_state(global_step: int, zero: bool = True) -> types.SimpleNamespace:
    return types.SimpleNamespace(global_step=global_step, is_world_process_zero=zero)


def test_hf_callback_windows_ranks_and_late_values(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The Trainer's event order: step g begins at global_step g-1, ends (and logs) at global_step g."""
    pytest.importorskip("transformers")
    from otel_bridge.integrations.huggingface import OtelBridgeCallback

    args = types.SimpleNamespace(to_dict=lambda: {"lr": 0.1})
    bridge, memory = memory_bridge(tmp_path)
    with bridge:
        other_rank = OtelBridgeCallback(bridge)
        for event in ("on_train_begin", "on_step_begin", "on_step_end", "on_train_end"):
            getattr(other_rank, event)(args, hf_state(1, zero=False), None)
        other_rank.on_log(args, hf_state(1, zero=False), None, logs={"loss": 1.0})
        assert other_rank.running_step is None

        callback = OtelBridgeCallback(bridge)
        callback.on_train_begin(args, hf_state(0), None)
        assert callback.running_step == 0
        callback.on_log(args, hf_state(0), None, logs={"eval_loss": 3.0})  # eval_on_start
        before_begin = time.time()
        callback.on_step_begin(args, hf_state(0), None)
        assert callback.running_step == 1
        after_begin = time.time()
        callback.on_step_end(args, hf_state(1), None)
        after_end = time.time()
        callback.on_log(args, hf_state(1), None, logs={"loss": 2.0, "test_acc": 0.5, "note": "text"})
        callback.on_log(args, hf_state(1), None, logs={"eval_loss": 1.0})  # end-of-epoch evaluation, same step
        callback.on_step_begin(args, hf_state(1), None)
        with caplog.at_level(logging.WARNING, logger="otel_bridge.integrations.huggingface"):
            callback.on_log(args, hf_state(1), None, logs={"eval_loss": 1.5})  # step 1's record was sent
        callback.on_step_end(args, hf_state(2), None)
        callback.on_log(args, hf_state(2), None, logs={"train_runtime": 9.0})
        callback.on_train_end(args, hf_state(2), None)
        assert callback.running_step is None
        bridge.collect(2)
    records = {record.step: record for record in memory.records}
    assert [(r.step, trainer_values(r)) for r in memory.records] == [
        (0, {"eval/loss": 3.0}),
        (1, {"train/loss": 2.0, "test/acc": 0.5, "eval/loss": 1.0}),
        (2, {"train/train_runtime": 9.0}),
    ]
    first = records[1]
    assert first.window_start is not None
    assert before_begin <= first.window_start <= after_begin, "the window starts at on_step_begin"
    assert after_begin <= first.time <= after_end, "the window ends at on_step_end, before on_log's values arrive"
    assert records[0].window_start is not None, "the record of the start of training has a window"
    assert before_begin <= records[0].time <= first.window_start
    assert records[2].window_start is not None
    assert records[2].window_start >= after_end
    assert "['eval/loss'] for step 1, whose record cannot take them" in caplog.text
    assert records[2].values[LATE_VALUES] == 1.0
    assert json.loads((bridge.run_dir / HPARAMS_FILE).read_text(encoding="utf-8")) == {"lr": 0.1}


def test_hf_callback_on_a_reused_bridge_leaves_refused_steps_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("transformers")
    from otel_bridge.integrations.huggingface import OtelBridgeCallback

    args = types.SimpleNamespace(to_dict=lambda: {})
    bridge, memory = memory_bridge(tmp_path)
    with bridge:
        bridge.log({"x": 1.0}, step=5)
        callback = OtelBridgeCallback(bridge, record_train_start=False, save_training_args=False)
        with caplog.at_level(logging.WARNING, logger="otel_bridge.integrations.huggingface"):
            callback.on_train_begin(args, hf_state(0), None)
            callback.on_step_begin(args, hf_state(0), None)  # step 1 after step 5: refused
            assert callback.running_step is None
            callback.on_step_end(args, hf_state(1), None)
            callback.on_log(args, hf_state(1), None, logs={"loss": 2.0})
            callback.on_train_end(args, hf_state(1), None)  # training goes on: nothing raised
    assert [r.step for r in memory.records] == [5]
    assert "step 1 is not recorded" in caplog.text
    assert "['train/loss'] for step 1, whose record cannot take them" in caplog.text


# -- Lightning -------------------------------------------------------------------------------------------------------


def test_lightning_example_records_in_jsonl_tensorboard_and_hparams(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    from examples.lightning_logger import main

    run_dir = main(tmp_path, STEPS)

    assert run_dir == tmp_path / "lightning"
    lines = read_jsonl(run_dir / "metrics.jsonl")
    check_records(lines, list(range(STEPS)), ["train/loss", "train/batch_size"])
    epoch_steps = [line["step"] for line in lines if "train/epoch_loss" in line]
    assert epoch_steps == [STEPS - 1], "the epoch metric, logged after the last batch at its step, joins that record"
    assert LATE_VALUES not in lines[-1], "nothing Lightning logged was left out"
    check_tensorboard(run_dir / "tensorboard", lines, ["train/loss", "train/epoch_loss", COUNTER_KEY])
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
        logger.log_metrics({"val_loss": 2.0}, step=0)  # validation at the same step: joins step 0's record
        logger.log_metrics({"loss_epoch": 1.5, "epoch": 0}, step=0)  # epoch-end metrics, same step
        logger.log_metrics({"loss": 0.5}, step=None)  # the next step: 1
        with caplog.at_level(logging.WARNING, logger="otel_bridge.integrations.lightning"):
            logger.log_metrics({"val_loss": 3.0, "val_acc": 0.5}, step=0)  # step 0's record was sent
        logger.log_metrics({"lr": 0.1}, step=1)
        assert logger.late_values == 2
        logger.finalize("success")  # sends the open record of step 1; the Bridge is the caller's
        bridge.collect(1)
        assert repr(bridge).endswith("closed=False)"), "a Bridge passed in belongs to the caller"
    assert [(r.step, trainer_values(r)) for r in memory.records] == [
        (0, {"loss": 1.0, "epoch": 0.0, "val_loss": 2.0, "loss_epoch": 1.5}),
        (1, {"loss": 0.5, "lr": 0.1}),
    ]
    assert memory.records[1].values[LATE_VALUES] == 2.0
    assert "logged ['val_acc', 'val_loss'] for step 0 after its record was sent" in caplog.text

    owned = OtelBridgeLogger({"trackers": [{"type": "jsonl"}], "run": {"dir": str(tmp_path / "owned")}})
    assert owned.name.startswith("otel-bridge-")
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    owned.log_hyperparams({"lr": 1})
    owned.log_metrics({"loss": 1.0}, step=0)
    owned.finalize("success")
    assert not (tmp_path / "owned").exists(), "ranks other than 0 create no Bridge"
    monkeypatch.setattr(rank_zero_only, "rank", 0)
    owned.log_metrics({"loss": 1.0}, step=0)
    owned.log_metrics({"val_loss": 2.0}, step=0)
    owned.finalize("success")
    lines = read_jsonl(Path(owned.log_dir) / "metrics.jsonl")
    assert [(line["step"], line["loss"], line["val_loss"]) for line in lines] == [(0, 1.0, 2.0)]
