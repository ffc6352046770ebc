"""patch_verl() turns verl's own ``marked_timer`` blocks into phases, against the real verl package (no GPU needed):
verl's ``Tracking`` built the way ``RayPPOTrainer.fit()`` builds it, ``marked_timer`` as ``ray_trainer`` bound it at
import time, and verl's loop shape (``step`` around everything, ``log(data, step)`` at the end). Two simulated vLLM
replicas serve traffic inside ``gen`` only; the test waits for each boundary's scrape before generating traffic."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from otel_bridge.exporters.naming import OUTSIDE_PHASES_KEY, STEP_SECONDS_KEY
from otel_bridge.integrations.verl import patch_verl
from tests.conftest import Replica

WORKER_GROUP = "verl"  # imports verl and torch here: one worker does for every such module (tests/plugins/tiers.py)

STEP_LEVEL_PHASE_KEYS = (STEP_SECONDS_KEY, OUTSIDE_PHASES_KEY)  # the step's own seconds, not a phase

TOKENS = "rollout/vllm/generation_tokens_total/delta"


@pytest.fixture
def profiler() -> ModuleType:
    """verl's profiler module (imported by the test that uses it, not by every worker collecting this module)."""
    return pytest.importorskip("verl.utils.profiler")


def test_verls_marked_timer_blocks_become_phases_without_changing_the_trainer(
    tmp_path: Path, replicas: list[Replica], profiler: ModuleType
) -> None:
    ray_trainer = importlib.import_module("verl.trainer.ppo.ray_trainer")  # binds marked_timer at import, as in fit()
    verls_timer = ray_trainer.marked_timer
    restore = patch_verl(
        {
            "metrics": [{"name": "vllm:generation_tokens_total", "type": "counter", "stats": ["delta"]}],
            "scrape": {"targets": [r.url for r in replicas], "sample_interval_s": 3600},
            "run": {"dir": str(tmp_path)},
        }
    )
    try:
        assert ray_trainer.marked_timer is not verls_timer
        from verl.utils.profiler import marked_timer  # what a trainer module imported after patch_verl() gets
        from verl.utils.tracking import Tracking  # what fit() imports

        assert marked_timer is ray_trainer.marked_timer
        logger = Tracking(project_name="p", experiment_name="phases", default_backend=["console"], config={})
        boundaries = 0

        def settle() -> None:
            nonlocal boundaries
            boundaries += 1
            for replica in replicas:
                replica.wait_for_scrapes(1 + boundaries)

        logger.log(data={"val/score": 0.0}, step=0)  # verl's validation before training
        settle()
        timings = []
        for step in (1, 2):
            timing_raw: dict[str, float] = {}
            with ray_trainer.marked_timer("step", timing_raw):  # not a phase: it is the step
                with ray_trainer.marked_timer("gen", timing_raw, color="red"):
                    settle()
                    with marked_timer("gen_max", timing_raw):  # nested inside a phase: verl's timing only
                        for replica in replicas:
                            replica.sim.complete_request(
                                prompt_tokens=4, generation_tokens=5 * step, ttft_s=0.01, e2e_s=0.1, queue_s=0.0,
                                itl_s=0.001,
                            )  # fmt: skip
                settle()
                with marked_timer("adv", timing_raw):
                    settle()
                settle()
                with marked_timer("update_actor", timing_raw):
                    settle()
                settle()
                with marked_timer("save_checkpoint", timing_raw):  # not one of verl's step phases
                    pass
            timings.append(timing_raw)
            logger.log(data={f"timing_s/{k}": v for k, v in timing_raw.items()}, step=step)
            settle()
        logger.finish()
    finally:
        restore()
    assert ray_trainer.marked_timer is verls_timer
    assert profiler.marked_timer is verls_timer

    for step, timing_raw in zip((1, 2), timings, strict=True):
        # verl's own timing is untouched
        assert set(timing_raw) == {"step", "gen", "gen_max", "adv", "update_actor", "save_checkpoint"}
        record = logger.bridge.record(step)
        assert record is not None
        phases = sorted(
            {k.split("/")[1] for k in record.values if k.startswith("phase/") and k not in STEP_LEVEL_PHASE_KEYS}
        )
        assert phases == ["adv", "gen", "update_actor"]
        assert record.values[f"phase/gen/{TOKENS}"] == 2 * 5 * step
        assert record.values[f"phase/adv/{TOKENS}"] == 0
        assert record.values[f"phase/update_actor/{TOKENS}"] == 0
        assert record.values[TOKENS] == 2 * 5 * step
        for name in phases:
            assert record.values[f"phase/{name}/seconds"] == pytest.approx(timing_raw[name], abs=0.05)


def test_each_of_verls_step_parts_becomes_a_phase(tmp_path: Path) -> None:
    """Every part of a PPO step that verl 0.9's ``fit()`` times, named as ``ray_trainer`` names it (the reference
    policy's block is ``str(Role.RefPolicy)``), becomes a phase through verl's own ``marked_timer``."""
    ray_trainer = importlib.import_module("verl.trainer.ppo.ray_trainer")
    parts = [
        "gen", "reward", "old_log_prob", str(ray_trainer.Role.RefPolicy), "values", "adv", "update_critic",
        "update_actor", "update_weights", "testing",
    ]  # fmt: skip
    restore = patch_verl({"run": {"dir": str(tmp_path)}})
    try:
        from verl.utils.tracking import Tracking

        logger = Tracking(project_name="p", experiment_name="parts", default_backend=["console"], config={})
        timing_raw: dict[str, float] = {}
        with ray_trainer.marked_timer("step", timing_raw):
            for name in parts:
                with ray_trainer.marked_timer(name, timing_raw):
                    pass
        logger.log(data={"timing_s/step": timing_raw["step"]}, step=1)
        logger.finish()
    finally:
        restore()
    record = logger.bridge.record(1)
    assert record is not None
    assert sorted(k for k in record.values if k.startswith("phase/")) == sorted(f"phase/{n}/seconds" for n in parts)
    assert "ref" in parts


def test_an_asynchronous_trainers_gen_is_waiting_for_rollouts(tmp_path: Path) -> None:
    """Issue 39: in verl's asynchronous trainers ``gen`` is the trainer waiting for samples the rollout side generated
    meanwhile (``FullyAsyncTrainer._fit_generate`` around its queue read): it is the phase ``wait_for_rollouts``, so a
    user tells it from the synchronous trainers' ``gen``, which generates. verl's own ``timing_s/gen`` is unchanged."""
    import asyncio
    from types import SimpleNamespace

    fully_async = importlib.import_module("verl.experimental.fully_async_policy.fully_async_trainer")
    # verl's own class, under its @ray.remote
    trainer_class = fully_async.FullyAsyncTrainer.__ray_metadata__.modified_class.__bases__[0]
    restore = patch_verl({"run": {"dir": str(tmp_path)}})
    try:
        from verl.utils.tracking import Tracking

        logger = Tracking(project_name="p", experiment_name="async", default_backend=["console"], config={})

        async def samples() -> tuple[int, Any]:
            await asyncio.sleep(0.2)  # the rollouter has not produced enough yet
            return 0, SimpleNamespace(meta_info={})

        trainer = SimpleNamespace(
            metrics={}, timing_raw={}, _get_samples_from_queue=samples,
            _collect_metrics_from_samples=lambda batch, metrics: None,
            config=SimpleNamespace(actor_rollout_ref=SimpleNamespace(rollout=SimpleNamespace(temperature=1.0))),
        )  # fmt: skip
        asyncio.run(trainer_class._fit_generate(trainer))  # verl's own code, its own marked_timer("gen", ...)
        logger.log(data={f"timing_s/{k}": v for k, v in trainer.timing_raw.items()}, step=1)
        logger.finish()
    finally:
        restore()
    record = logger.bridge.record(1)
    assert record is not None
    assert record.values["timing_s/gen"] >= 0.2
    phases = sorted(k for k in record.values if k.startswith("phase/") and k not in STEP_LEVEL_PHASE_KEYS)
    assert phases == ["phase/wait_for_rollouts/seconds"]
    assert record.values["phase/wait_for_rollouts/seconds"] == pytest.approx(record.values["timing_s/gen"], abs=0.05)
