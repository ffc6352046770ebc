"""Issue 39: verl 0.9's asynchronous trainers, as they ship, through the documented setup hook.

A Ray job started with the hook (``worker_process_setup_hook=otel_bridge.integrations.verl.setup`` plus
``$OTEL_BRIDGE_CONFIG``, as docs/verl.md says) runs, in one actor, verl's own trainer classes with the parts that need
GPU worker groups stood in for by CPU time under verl's own timer names:

- ``FullyAsyncTrainer`` (``verl.experimental.fully_async_policy``) built from verl's own ``fully_async_ppo_trainer``
  config, run the way ``fully_async_main`` runs it (weight sync, validation, ``fit()``): its own ``Tracking``
  construction, its wait for samples from verl's own ``MessageQueue`` (``_fit_generate``), local steps, weight sync
  (``_fit_update_weights``), validation, metrics aggregation and ``log(..., step=current_param_version)`` calls. A
  stand-in rollouter actor fills the queue while the rollout servers are awake;
- ``OneStepOffRayTrainer`` (``verl.experimental.one_step_off_policy``) running its own ``fit()``: the next batch is
  generated while the trainer updates, ``gen`` waits for it, ``sync_rollout_weights`` syncs.

The weight sync of both is what verl's checkpoint manager does to the servers, done through vLLM's own sleep API
(``POST /sleep``, ``POST /wake_up``): generation stops for the sync. Two simulated vLLM servers in this process
generate all along otherwise, so traffic overlaps the trainer's updates. The records are read back from verl's
``file`` tracker.

A phase's seconds are checked by construction, never against a tolerance: the phase opens and closes inside verl's
timer around its block, so it lasts at most verl's ``timing_s/<block>``, and at least the block's body as the script
measures it inside the block (the weight sync, the stand-in work, the wait for samples; one-step-off's ``gen`` awaits
the batch generated meanwhile: what was left of that generation when the step began).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from otel_bridge.config import ENV_CONFIG_FILE
from otel_bridge.tools.simulation import EngineAsleepError
from tests.conftest import Replica

if TYPE_CHECKING:
    from tests.ray_fixtures import RayCluster

pytestmark = pytest.mark.integration

SETUP_HOOK = "otel_bridge.integrations.verl.setup"
SYNC_CYCLE_STEPS = 2  # trigger_parameter_sync_step: local updates per weight sync, per tracker step
TOKENS = "rollout/vllm/generation_tokens_total/delta"
IDLE = "rollout/vllm/num_requests_running/servers/idle_seconds"
AWAKE = "rollout/vllm/engine_sleep_state/min/sleep_state.awake"  # servers awake at every sample
ASLEEP = "rollout/vllm/engine_sleep_state/max/sleep_state.weights_offloaded"
VAL_KEY = "val-core/gsm8k/reward/mean@1"
SYNC_S = 1.0  # the weight sync: the rollout servers sleep this long, one after the other, inside its phase
SAMPLE_INTERVAL_S = 0.1  # scrape.sample_interval_s
SAMPLE_GAP = "otel_bridge/sample_gap_s"
LAG = "otel_bridge/boundary_lag_s"
CLOCK_EPS_S = 1e-6  # a phase's seconds against verl's timer around it: see assert_phase_of_blocks


def assert_phase_of_blocks(
    record: dict[str, float], phase: str, body_s: float, blocks_s: float, blocks: int = 1
) -> None:
    """The record's ``phase``, made of ``blocks`` of verl's ``marked_timer`` blocks, lasts at least their bodies
    (``body_s``: the seconds the script measured inside them) and at most verl's timers around them (``blocks_s``):
    the phase opens and closes inside verl's timer. By construction: the bodies are ``time.time()`` readings inside
    the phase's own (rounding keeps their order). verl's timer reads ``perf_counter()`` (codetiming's ``Timer``): the
    two clocks run at one rate (the kernel slews both alike) and ``time.time()``'s float is off by under 0.25 µs a
    reading at today's epoch, which CLOCK_EPS_S a block covers."""
    seconds, what = record[f"phase/{phase}/seconds"], f"step {record['step']}, {phase}"
    assert body_s <= seconds, f"{what}: the phase ({seconds} s) misses part of its blocks' bodies ({body_s} s)"
    assert seconds <= blocks_s + blocks * CLOCK_EPS_S, f"{what}: the phase ({seconds} s) outlasts verl's ({blocks_s} s)"


def slept_idle_s(record: dict[str, float]) -> float:
    """The servers' idle server-seconds in the sync's phase at least: each slept SYNC_S inside it, and each edge of a
    sleep is seen to within the longest time the sampler went without a reading (a sample interval, or the longer gap
    the record reports: the sampler's child process runs at a low priority, and a loaded machine starves it). Not the
    phase's length: the phase also holds the sleep and wake-up requests, while a server is still or already generating
    (0.29 s of a 1.29 s phase on a loaded run)."""
    return 2 * (SYNC_S - 2 * max(SAMPLE_INTERVAL_S, record[SAMPLE_GAP]))


def read_inside(record: dict[str, float], phase: str) -> bool:
    """Whether the record says its readings stood for ``phase``: its boundaries read, and no reading missed, for less
    than half the phase's length. The sampler's child process runs at a low priority: on a loaded run (cc26) it read
    a 0.63 s ``update_actor`` 1.3 s late with a 1.0 s gap, so what stood for it was rendered in the sync after it,
    the servers asleep and generating nothing; the record said so (its lag and sample gap), and nothing bounds the
    phase's figures then."""
    half = record[f"phase/{phase}/seconds"] / 2
    return record[LAG] < half and record[SAMPLE_GAP] < half


RUNNER_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys, time
    import ray
    import requests
    from omegaconf import OmegaConf

    address, runtime_env, configs, bases, out = (
        sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4]), sys.argv[5]
    )
    ray.init(address=address, runtime_env=runtime_env, logging_level="ERROR", log_to_driver=False)
    SYNC_S = @SYNC_S@  # the weight sync: the rollout servers sleep this long
    WORK_S = {"reward": 0.1, "old_log_prob": 0.1, "adv": 0.05, "update_actor": 0.3}

    def sync_weights(bases):
        # what verl's checkpoint manager does to the rollout servers (abort, sync, resume), through vLLM's sleep API;
        # returns its seconds
        start = time.time()
        for base in bases:
            requests.post(f"{base}/sleep?level=1", timeout=10).raise_for_status()
        time.sleep(SYNC_S)
        for base in bases:
            requests.post(f"{base}/wake_up", timeout=10).raise_for_status()
        return time.time() - start

    @ray.remote(num_cpus=0)
    class Rollouter:
        # Stands in for verl's FullyAsyncRollouter: a sample into verl's own MessageQueue every interval while the
        # servers are awake, the methods FullyAsyncTrainer calls on it, and None once the data is used up.
        def __init__(self, queue, bases, samples, interval_s):
            from verl.experimental.fully_async_policy.message_queue import MessageQueueClient

            self.client, self.bases = MessageQueueClient(queue), bases
            self.samples, self.interval_s = samples, interval_s
            self.produced = self.version = 0

        async def run(self):
            while self.produced < self.samples:
                await asyncio.sleep(self.interval_s)
                if requests.get(f"{self.bases[0]}/is_sleeping", timeout=10).json()["is_sleeping"]:
                    continue
                await self.client.put_sample(ray.cloudpickle.dumps({"param_version": self.version}))
                self.produced += 1
            await self.client.put_sample(sample=None)  # verl's rollouter ends the data this way

        def get_total_produced_samples(self):
            return self.produced

        def get_completed_steps(self):
            return self.version

        async def reset_staleness(self):
            self.version += 1
            return {}

        def do_validate(self):
            return {"val-core/gsm8k/reward/mean@1": 0.5}

    class Batch:  # what verl's trainers read of a DataProto here: its meta_info
        def __init__(self, meta_info):
            self.meta_info = meta_info

    class CpuUpdates:
        # verl's step parts that need GPU worker groups (reward, log probs, advantage, the actor update; the profiler
        # hooks), stood in for by their time on the CPU under verl's own timer names. self.bodies: this step's seconds
        # measured inside verl's blocks (their bodies), by block name
        def _work(self, name, batch):
            from verl.utils.debug import marked_timer

            with marked_timer(name, self.timing_raw):
                start = time.time()
                time.sleep(WORK_S[name])
                self.bodies[name] = time.time() - start
            return batch

        def _fit_start_profile(self, should_profiler=None):  # the start of each fit_step, before its blocks
            self.bodies = {}

        def _fit_stop_profile(self, should_profiler=None):
            pass

        def _fit_compute_reward(self, batch):
            return self._work("reward", batch)

        def _fit_compute_log_prob(self, batch):
            return self._work("old_log_prob", batch)

        def _fit_compute_advantage(self, batch):
            return self._work("adv", batch)

        def _fit_update_actor(self, batch):
            return self._work("update_actor", batch)

        def _fit_compute_ref_log_prob(self, batch):
            return batch

        def _fit_compute_critic(self, batch):
            return batch

        def _fit_update_critic(self, batch):
            return batch

        def _fit_collect_metrics(self, batch):  # compute_timing_metrics' timing_s part (the rest needs tensors)
            self.metrics.update({f"timing_s/{k}": v for k, v in self.timing_raw.items()})

    @ray.remote(num_cpus=0)
    class Runner:
        def __init__(self, bases):
            self.bases = bases

        async def fully_async(self, config_yaml, queue, rollouter):
            from verl.experimental.fully_async_policy import fully_async_trainer
            from verl.experimental.fully_async_policy.message_queue import MessageQueueClient

            # verl's own class, under its @ray.remote
            base = fully_async_trainer.FullyAsyncTrainer.__ray_metadata__.modified_class.__bases__[0]
            bases = self.bases

            class ServerSync:
                async def update_weights(self, global_steps=None):
                    seconds = await asyncio.get_running_loop().run_in_executor(None, sync_weights, bases)
                    trainer.bodies["update_weights"] = seconds

            class CpuFullyAsyncTrainer(CpuUpdates, base):
                async def _get_samples_from_queue(self):
                    # verl's loop over MessageQueueClient.get_sample, without assembling a DataProto (a tokenizer's)
                    start, samples = time.time(), []
                    while len(samples) < self.required_samples:
                        sample, _ = await self.message_queue_client.get_sample()
                        if sample is None:
                            return None, None
                        samples.append(ray.cloudpickle.loads(sample))
                    versions = [s["param_version"] for s in samples]
                    wait = time.time() - start
                    self.bodies["gen"] = wait  # all of this runs inside verl's gen block
                    return 0, Batch({"trajectory_param_versions": versions, "fully_async/total_wait_time": wait})

                def _fit_collect_metrics(self, batch):
                    super()._fit_collect_metrics(batch)
                    # the truth: which tracker step this local update belongs to (its sync cycle) and its timings
                    synced = "timing_s/param_sync" in self.timing_raw
                    step = self.current_param_version if synced else self.current_param_version + 1
                    updates.append([step, dict(self.timing_raw), dict(self.bodies)])

            updates = []
            config = OmegaConf.create(config_yaml)
            trainer = CpuFullyAsyncTrainer(config, tokenizer=None, role_worker_mapping={}, resource_pool_manager=None)
            trainer.bodies = {}
            from otel_bridge.integrations.verl import Tracking as OtelBridgeTracking

            kind = isinstance(trainer.logger, OtelBridgeTracking)
            trainer.rollouter = rollouter
            trainer.checkpoint_manager = ServerSync()
            trainer.set_message_queue_client(MessageQueueClient(queue))
            trainer.set_total_train_steps(100)
            # as fully_async_main runs it: param sync before fit, validation, then fit()
            await trainer._fit_update_weights()
            first_sync, first_sync_body = trainer.timing_raw["timing_s/param_sync"], trainer.bodies["update_weights"]
            await trainer._fit_validate(True)
            await trainer.fit()
            report = trainer.logger.finish()
            return {
                "kind": kind, "complete": report.complete, "last_version": trainer.current_param_version,
                "first_sync": first_sync, "first_sync_body": first_sync_body, "updates": updates,
            }

        async def one_step_off(self, config_yaml, steps):
            from verl.experimental.one_step_off_policy.ray_trainer import OneStepOffRayTrainer
            from verl.utils.debug import marked_timer

            bases = self.bases

            class ServerSync:  # verl's checkpoint manager's update_weights is synchronous there (auto_await)
                def update_weights(self, global_steps=None):
                    trainer.bodies["update_weights"] = sync_weights(bases)
                    return {}

            class CpuOneStepOffTrainer(CpuUpdates, OneStepOffRayTrainer):
                def _create_dataloader(self, *args, **kwargs):  # a dataset of `steps` batches
                    self.train_dataloader = [{} for _ in range(steps)]
                    self.total_training_steps = steps
                    self.train_dataset = None

                def _load_checkpoint(self):  # a fresh run: nothing to resume
                    pass

                def _validate(self):
                    return {"val-core/gsm8k/reward/mean@1": 0.5}

                def _async_gen_next_batch(self, continuous_iterator):
                    # verl makes the next batch's task in a step (the first one before step 1) and awaits it in the
                    # next step's gen block; the coroutine runs later, so the step it was made in is noted now
                    return self._generate_batch(continuous_iterator, self.bodies)

                async def _generate_batch(self, continuous_iterator, created_in):
                    # verl: build the batch, then `with marked_timer("generate_async")` await the servers' generation
                    try:
                        epoch, _ = next(continuous_iterator)
                    except StopIteration:
                        return None
                    timing_raw, waited_from = {}, None
                    with marked_timer("generate_async", timing_raw, color="purple"):
                        for _ in range(20):  # 1 s of generation, awake every 0.05 s
                            await asyncio.sleep(0.05)
                            if waited_from is None and self.bodies is not created_in:
                                # The next fit_step began (_fit_start_profile); nothing from there to its gen block's
                                # `await batch_data_future` yields to the event loop: it waits inside that block now
                                waited_from = time.time()
                    if waited_from is not None:  # of gen's body, the part the trainer waited in at least
                        self.bodies["gen"] = time.time() - waited_from
                    return {}, timing_raw, epoch, Batch({"timing": {}}), None

                def _fit_collect_metrics(self, batch):
                    super()._fit_collect_metrics(batch)
                    bodies.append([self.global_steps, dict(self.bodies)])

            bodies = []
            config = OmegaConf.create(config_yaml)
            trainer = CpuOneStepOffTrainer(config, tokenizer=None, role_worker_mapping={}, resource_pool_manager=None)
            trainer.bodies = {}
            trainer.actor_rollout_wg = None
            trainer.checkpoint_manager = ServerSync()
            await trainer.fit()
            from otel_bridge.integrations.verl import Tracking as OtelBridgeTracking

            kind = isinstance(trainer.logger, OtelBridgeTracking)
            report = trainer.logger.finish()
            return {"kind": kind, "complete": report.complete, "bodies": bodies}

    from verl.experimental.fully_async_policy.message_queue import MessageQueue

    result = {}
    runner = Runner.remote(bases)
    fa_config = OmegaConf.create(configs["fully_async"])
    required = fa_config.actor_rollout_ref.actor.ppo_mini_batch_size * fa_config.async_training.require_batches
    queue = MessageQueue.options(num_cpus=0).remote(fa_config, 100)
    cycles = 3
    samples = required * fa_config.async_training.trigger_parameter_sync_step * cycles
    rollouter = Rollouter.remote(queue, bases, samples, 0.4)
    producing = rollouter.run.remote()
    result["fully_async"] = ray.get(runner.fully_async.remote(configs["fully_async"], queue, rollouter))
    ray.get(producing)
    result["one_step_off"] = ray.get(runner.one_step_off.remote(configs["one_step_off"], 3))
    with open(out, "w") as f:
        json.dump(result, f)
    """
).replace("@SYNC_S@", repr(SYNC_S))


def compose(config_dir: Path, name: str, overrides: list[str]) -> Any:
    """verl's own trainer config ``name`` composed by Hydra, as verl's entry points compose it: from the directory
    holding the ``verl`` package (one-step-off's config finds ``ppo_trainer`` at ``file://verl/trainer/config``,
    relative to where verl is started)."""
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with contextlib.chdir(Path(verl.__file__).parent.parent), initialize_config_dir(str(config_dir), version_base=None):
        return hydra_compose(config_name=name, overrides=overrides)


def verl_configs() -> dict[str, Any]:
    """verl's ``fully_async_ppo_trainer`` and ``one_step_off_ppo_trainer`` configs for a small CPU run."""
    import verl
    from omegaconf import OmegaConf

    experimental = Path(verl.__file__).parent / "experimental"
    common = [
        "trainer.logger=[file]",
        "trainer.project_name=async",
        "trainer.save_freq=-1",
        "trainer.device=cpu",
        "algorithm.adv_estimator=grpo",  # no critic
        "actor_rollout_ref.hybrid_engine=False",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    ]
    fully_async = compose(
        experimental / "fully_async_policy" / "config",
        "fully_async_ppo_trainer",
        [
            *common,
            "trainer.experiment_name=fully-async",
            "trainer.test_freq=2",
            f"async_training.trigger_parameter_sync_step={SYNC_CYCLE_STEPS}",
            "async_training.require_batches=1",
        ],
    )
    one_step_off = compose(
        experimental / "one_step_off_policy" / "config",
        "one_step_off_ppo_trainer",
        [*common, "trainer.experiment_name=one-step-off", "trainer.test_freq=-1", "trainer.val_before_train=True"],
    )
    return {
        "fully_async": OmegaConf.to_container(fully_async, resolve=True),
        "one_step_off": OmegaConf.to_container(one_step_off, resolve=True),
    }


def _records(path: Path) -> dict[int, dict[str, float]]:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return {int(line["step"]): line for line in lines}


def _generate_all_along(replicas: list[Replica], stop: threading.Event) -> None:
    """The rollout servers generate whenever they are awake: two requests running, one finishing every 0.05 s."""
    while not stop.wait(0.05):
        for replica in replicas:
            try:
                replica.sim.set_running(2)
                replica.sim.complete_request(
                    prompt_tokens=8, generation_tokens=5, ttft_s=0.01, e2e_s=0.05, queue_s=0.0, itl_s=0.001
                )
            except EngineAsleepError:  # the weight sync: vLLM answers 503 while asleep
                continue


@pytest.fixture(scope="module")
def async_runs(ray_cluster: RayCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Both trainers run once through the setup hook; their results and records (read back from verl's ``file``
    tracker)."""
    import ray

    tmp = tmp_path_factory.mktemp("verl-async")
    replicas = [Replica(), Replica()]
    stop = threading.Event()
    traffic = threading.Thread(target=_generate_all_along, args=(replicas, stop), daemon=True)
    try:
        bridge_yaml = tmp / "otel-bridge.yaml"
        bridge_yaml.write_text(
            yaml.safe_dump(
                {
                    "scrape": {"targets": [r.url for r in replicas], "sample_interval_s": SAMPLE_INTERVAL_S},
                    "metrics": [{"preset": "vllm"}],
                    "run": {"dir": str(tmp / "runs")},
                }
            ),
            encoding="utf-8",
        )
        runtime_env = {
            "worker_process_setup_hook": SETUP_HOOK,
            "env_vars": {ENV_CONFIG_FILE: str(bridge_yaml), "VERL_FILE_LOGGER_ROOT": str(tmp / "verl-files")},
        }
        out = tmp / "result.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_BRIDGE")}
        bases = [r.url.removesuffix("/metrics") for r in replicas]
        traffic.start()
        done = subprocess.run(
            [
                sys.executable, "-c", RUNNER_SCRIPT, ray.get_runtime_context().gcs_address, json.dumps(runtime_env),
                json.dumps(verl_configs()), json.dumps(bases), str(out),
            ],
            capture_output=True, text=True, timeout=900, check=False, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        result = json.loads(out.read_text(encoding="utf-8"))
        files = tmp / "verl-files" / "async"
        yield {
            **result,
            "records": {
                "fully_async": _records(files / "fully-async.jsonl"),
                "one_step_off": _records(files / "one-step-off.jsonl"),
            },
        }
    finally:
        stop.set()
        if traffic.is_alive():
            traffic.join()
        for replica in replicas:
            replica.stop()


def _rollout_side(record: dict[str, float], phase: str) -> str:
    """What the record says of the rollout servers in ``phase`` (for a failure's message)."""
    prefix = f"phase/{phase}/"
    keys = ("seconds", IDLE, AWAKE, ASLEEP, TOKENS)
    said = {key: record.get(prefix + key) for key in keys}
    health = {key: record.get(key) for key in (LAG, SAMPLE_GAP)}
    return f"step {record.get('step')}, {phase}: {said}, {health}"


def _phases(record: dict[str, float]) -> set[str]:
    return {key.split("/")[1] for key in record if key.startswith("phase/") and key.endswith("/seconds")} - {
        "step_seconds",
        "outside_seconds",
    }


def test_fully_async_trainer_one_record_per_sync_cycle_with_the_waits_and_the_weight_sync_as_phases(
    async_runs: dict[str, Any],
) -> None:
    result = async_runs["fully_async"]
    assert result["kind"] is True, "verl's FullyAsyncTrainer built otel-bridge's Tracking"
    assert result["complete"] is True
    records = async_runs["records"]["fully_async"]
    # one tracker step per parameter version (verl's step=self.current_param_version): 0 is the sync before fit()
    assert sorted(records) == list(range(result["last_version"] + 1))
    assert result["last_version"] >= 3
    assert_phase_of_blocks(records[0], "update_weights", result["first_sync_body"], result["first_sync"])
    updates = [(step, timings) for step, timings, _ in result["updates"]]
    for step in range(1, result["last_version"] + 1):
        record = records[step]
        cycle = [timings for s, timings in updates if s == step]
        bodies = [measured for s, _, measured in result["updates"] if s == step]
        assert len(cycle) == SYNC_CYCLE_STEPS, "a tracker step is a sync cycle of trigger_parameter_sync_step updates"
        # one key per phase name, its seconds those of the whole cycle
        assert _phases(record) >= {
            "wait_for_rollouts",
            "reward",
            "old_log_prob",
            "adv",
            "update_actor",
            "update_weights",
        }
        assert "gen" not in _phases(record), "an asynchronous trainer's gen waits for rollouts: it is no generating"
        assert not any("_2" in name for name in _phases(record)), "repeats are summed under one key by default"
        for phase, timer in (("wait_for_rollouts", "gen"), ("update_actor", "update_actor"), ("reward", "reward")):
            verls = math.fsum(timings[timer] for timings in cycle)
            body = math.fsum(measured[timer] for measured in bodies)
            assert_phase_of_blocks(record, phase, body, verls, len(cycle))
        (sync,) = [timings["timing_s/param_sync"] for timings in cycle if "timing_s/param_sync" in timings]
        (synced,) = [measured["update_weights"] for measured in bodies if "update_weights" in measured]
        assert_phase_of_blocks(record, "update_weights", synced, sync)
        # verl's own keys, unchanged: its MetricsAggregator's sums over the local updates it holds when the sync is
        # logged (the cycle's first k-1 and the previous cycle's last: it adds an update after logging the cycle;
        # fit() logs the last version's once more after the data ran out)
        held = updates[max(0, updates.index((step, cycle[-1])) - SYNC_CYCLE_STEPS) : updates.index((step, cycle[-1]))]
        if step < result["last_version"]:
            verls = record["timing_s/gen"]
            assert verls == pytest.approx(sum(t["gen"] for _, t in held)), (step, verls, held, cycle)
        assert record["fully_async/trainer/idle_ratio"] == pytest.approx(
            record["timing_s/gen"] / record["timing_s/step"]
        )
        # the rollout side meanwhile: generating while the trainer waits and while it updates, asleep for the sync
        assert f"phase/wait_for_rollouts/{TOKENS}" in record  # tokens while the trainer waited: 0 if it did not
        updated = _rollout_side(record, "update_actor")
        if read_inside(record, "update_actor"):  # the servers generate while the trainer updates
            assert record[f"phase/update_actor/{TOKENS}"] > 0, updated
            assert record[f"phase/update_actor/{IDLE}"] <= 0.2 * 2 * record["phase/update_actor/seconds"], updated
        synced = _rollout_side(record, "update_weights")
        assert record[f"phase/update_weights/{IDLE}"] >= slept_idle_s(record), f"idle through the sync: {synced}"
        if record[SAMPLE_GAP] < SYNC_S:  # a reading while both slept
            assert record[f"phase/update_weights/{AWAKE}"] == 0, synced
            assert record[f"phase/update_weights/{ASLEEP}"] == 2, synced
        # the step covers its whole cycle, the sync included: its idle server-seconds hold the sync's (to a sampling
        # interval, or the longest gap between readings, per server at each edge of the sync)
        resolution = max(SAMPLE_INTERVAL_S, record[SAMPLE_GAP])
        assert record[IDLE] >= record[f"phase/update_weights/{IDLE}"] - 2 * 2 * resolution
        assert record[TOKENS] >= sum(record[f"phase/{p}/{TOKENS}"] for p in ("wait_for_rollouts", "update_actor"))
    assert sum(records[s][f"phase/wait_for_rollouts/{TOKENS}"] for s in range(1, result["last_version"] + 1)) > 0
    validated = [step for step, record in records.items() if VAL_KEY in record]
    assert validated
    assert all(step % 2 == 0 for step in validated)


def test_one_step_off_trainer_waits_for_the_batch_generated_during_the_previous_update(
    async_runs: dict[str, Any],
) -> None:
    result = async_runs["one_step_off"]
    assert result["kind"] is True
    assert result["complete"] is True
    records = async_runs["records"]["one_step_off"]
    assert sorted(records) == [0, 1, 2, 3]
    assert VAL_KEY in records[0]
    bodies = dict(result["bodies"])
    # the first batch's generation only starts once step 1's gen awaits it: all of it is the trainer's wait
    assert "gen" in bodies[1]
    for step in (1, 2, 3):
        record = records[step]
        assert _phases(record) >= {"wait_for_rollouts", "update_weights", "update_actor"}
        assert "gen" not in _phases(record)
        # gen awaits the batch generated meanwhile: its measured body is what was left of the generation when the step
        # began (nothing when the batch was ready by then)
        assert_phase_of_blocks(record, "wait_for_rollouts", bodies[step].get("gen", 0.0), record["timing_s/gen"])
        synced = bodies[step]["update_weights"]
        assert_phase_of_blocks(record, "update_weights", synced, record["timing_s/update_weights"])
        assert record["timing_s/generate_async"] > 0  # verl's own timing of the generation, which is no phase
        if read_inside(record, "update_actor"):
            assert record[f"phase/update_actor/{TOKENS}"] > 0, _rollout_side(record, "update_actor")
        assert record[f"phase/update_weights/{IDLE}"] >= slept_idle_s(record), _rollout_side(record, "update_weights")
