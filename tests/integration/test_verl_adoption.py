"""Issue 26: a verl user adopts otel-bridge with verl's own entry point unchanged, in the one way docs/verl.md
documents: a Ray ``runtime_env`` setup hook (a Hydra override verl's config accepts) plus ``$OTEL_BRIDGE_CONFIG``.

Against the real verl 0.9.1 (a dev extra), a real local Ray cluster, a real Prometheus and simulated vLLM servers
labelled the way verl starts vLLM (``served_model_name`` = the model path's last segment):

- verl's own Hydra config takes the documented overrides and verl's own dataclass conversion accepts them (and
  refuses what docs/verl.md says to keep out of verl's config);
- a job started the way ``verl.trainer.main_ppo`` starts Ray (verl's default runtime_env merged with the override)
  runs an actor that does what verl's ``TaskRunner`` does: imports verl's v1 ``trainer_base`` (which binds
  ``Tracking`` at import time), builds ``Tracking`` as verl's trainer does, times verl's ``marked_timer`` phases and
  logs verl's validation metrics; the record then holds the rollout servers verl registered with
  ``update_prometheus_config``, only the policy model's, the phases, and ``mean@1`` unchanged.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from otel_bridge.config import ENV_CONFIG_FILE, ENV_PROMETHEUS_URL
from otel_bridge.integrations.verl import verl_bridge_config, verl_served_model_name
from tests.conftest import Replica
from tests.helpers.prometheus_server import PrometheusServer
from tests.integration.test_verl_real import (
    _finish_requests,
    _loopback_only_ray_sd_file,
    _rollout_targets,
    _wait_for,
)

if TYPE_CHECKING:
    from tests.ray_fixtures import RayCluster

pytestmark = pytest.mark.integration

MODEL_PATH = "/root/models/deepseek-llm-7b-chat"  # verl's default served_model_name is actor_rollout_ref.model.path
SETUP_HOOK = "otel_bridge.integrations.verl.setup"
TOKENS = "rollout/vllm/generation_tokens_total/delta"
REQUESTS = "rollout/vllm/request_success_total/delta"
POLICY_TOKENS, OTHER_TOKENS = 7, 1000  # per request: the record's tokens per request tell whose requests it counted


def compose_verl_config(overrides: list[str]) -> Any:
    """verl's own ``ppo_trainer.yaml`` composed by Hydra with ``overrides``, as ``python -m verl.trainer.main_ppo``
    composes it."""
    import verl
    from hydra import compose, initialize_config_dir

    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides)


def documented_overrides(config_file: Path, prometheus_port: int, prometheus_file: Path) -> list[str]:
    return [
        f"actor_rollout_ref.model.path={MODEL_PATH}",
        "actor_rollout_ref.rollout.prometheus.enable=True",
        f"actor_rollout_ref.rollout.prometheus.port={prometheus_port}",
        f"actor_rollout_ref.rollout.prometheus.file={prometheus_file}",
        f"+ray_kwargs.ray_init.runtime_env.worker_process_setup_hook={SETUP_HOOK}",
        f"+ray_kwargs.ray_init.runtime_env.env_vars.{ENV_CONFIG_FILE}={config_file}",
    ]


def verl_runtime_env(config: Any) -> dict[str, Any]:
    """The runtime_env ``verl.trainer.main_ppo.run_ppo`` passes to ``ray.init`` (its own lines, verl 0.9.1)."""
    from omegaconf import OmegaConf
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    default_runtime_env = get_ppo_ray_runtime_env(config)
    runtime_env_kwargs = config.ray_kwargs.get("ray_init", {}).get("runtime_env", {})
    merged = OmegaConf.to_container(OmegaConf.merge(default_runtime_env, runtime_env_kwargs))
    assert isinstance(merged, dict)
    return {key: value for key, value in merged.items() if value is not None}


def test_verls_config_takes_the_documented_overrides_and_the_model_name_is_verls(tmp_path: Path) -> None:
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    config = compose_verl_config(documented_overrides(tmp_path / "otel-bridge.yaml", 9191, tmp_path / "p.yml"))
    prometheus = omega_conf_to_dataclass(config.actor_rollout_ref.rollout.prometheus)  # verl's own conversion
    assert prometheus.served_model_name == MODEL_PATH
    runtime_env = verl_runtime_env(config)
    assert runtime_env["worker_process_setup_hook"] == SETUP_HOOK
    assert runtime_env["env_vars"][ENV_CONFIG_FILE] == str(tmp_path / "otel-bridge.yaml")

    # what verl's trainer hands Tracking: OmegaConf.to_container(config, resolve=True)
    bridge_config = verl_bridge_config(
        {}, project_name="p", experiment_name="e", default_backend="console",
        config=OmegaConf.to_container(config, resolve=True),
    )  # fmt: skip
    assert bridge_config.prometheus.ray_port == 9191
    assert verl_served_model_name(MODEL_PATH) == "deepseek-llm-7b-chat"
    assert {m.labels.get("model_name") for m in bridge_config.metrics} == {"deepseek-llm-7b-chat"}

    # what docs/verl.md keeps out of verl's config: verl's dataclass refuses keys it does not know
    refused = compose_verl_config(["+actor_rollout_ref.rollout.prometheus.metrics_to_log=[vllm:num_requests_running]"])
    with pytest.raises(Exception, match="metrics_to_log"):
        omega_conf_to_dataclass(refused.actor_rollout_ref.rollout.prometheus)


def test_the_init_file_keeps_verls_model_filter(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 36: the file docs/verl.md step 3 writes (``otel-bridge init --prometheus auto --tracker wandb``: an
    explicit ``- preset: vllm``), passed as verl's runtime_env merge passes it, reads only the model verl serves, and a
    WARNING says which filter is in force; a file that names models itself keeps them."""
    import logging

    from omegaconf import OmegaConf

    from otel_bridge.producers.metric_set import resolve_metrics
    from tests.cli.support import run_cli

    done = run_cli(["init", "--prometheus", "auto", "--tracker", "wandb"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    config = compose_verl_config(documented_overrides(tmp_path / "otel-bridge.yaml", 9191, tmp_path / "p.yml"))
    named = verl_runtime_env(config)["env_vars"][ENV_CONFIG_FILE]  # the file the Ray workers are told about
    served = verl_served_model_name(MODEL_PATH)
    with caplog.at_level(logging.WARNING, logger="otel_bridge"):
        bridge_config = verl_bridge_config(
            named, project_name="p", experiment_name="e", default_backend="console",
            config=OmegaConf.to_container(config, resolve=True),
        )  # fmt: skip
    queries = resolve_metrics(bridge_config.metrics)
    assert queries, "the file's vllm preset"
    for query in queries:
        assert dict(query.matchers).get("model_name") == served, query
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"model_name={served!r}" in w and "served_model_name" in w for w in warned), warned

    mine = tmp_path / "mine.yaml"
    mine.write_text(
        yaml.safe_dump({"metrics": [{"preset": "vllm", "labels": {"model_name": "reference"}}, {"preset": "dcgm"}]}),
        encoding="utf-8",
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="otel_bridge"):
        kept = verl_bridge_config(
            mine, project_name="p", experiment_name="e", default_backend="console",
            config=OmegaConf.to_container(config, resolve=True),
        )  # fmt: skip
    models = {dict(q.matchers).get("model_name") for q in resolve_metrics(kept.metrics)}
    assert models == {"reference", None}, "the file's own model filter; the GPU preset has no model label"
    assert any("'reference'" in r.getMessage() for r in caplog.records), "the filter in force is said"


ACTOR_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    import ray
    from omegaconf import OmegaConf

    address, runtime_env, config_yaml, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
    ray.init(address=address, runtime_env=runtime_env, logging_level="ERROR", log_to_driver=False)

    @ray.remote(num_cpus=0)
    class TaskRunner:
        def run(self, config_yaml):
            import logging

            warnings = []

            class Keep(logging.Handler):
                def emit(self, record):
                    warnings.append(record.getMessage())

            logging.getLogger("otel_bridge").addHandler(Keep(logging.WARNING))
            # what verl's TaskRunnerV1.run does first: import the v1 trainer, which binds Tracking at import time
            from verl.trainer.ppo.v1 import trainer_base
            from verl.utils.profiler import marked_timer

            config = OmegaConf.create(config_yaml)
            logger = trainer_base.Tracking(  # as trainer_base.PPOTrainer builds it
                project_name=config.trainer.project_name,
                experiment_name=config.trainer.experiment_name,
                default_backend=config.trainer.logger,
                config=OmegaConf.to_container(config, resolve=True),
            )
            from otel_bridge.integrations.verl import Tracking as OtelBridgeTracking

            kind = isinstance(logger, OtelBridgeTracking)
            logger.log(data={"actor/pg_loss": 1.0}, step=0)
            timing_raw = {}
            with marked_timer("gen", timing_raw):
                time.sleep(1.5)
            with marked_timer("update_actor", timing_raw):
                time.sleep(1.0)
            uids = ["a", "a", "b", "b"]
            val = trainer_base.PPOTrainer._val_metrics_update(
                None, ["gsm8k"] * 4, uids, {"reward": [1.0, 0.0, 1.0, 1.0]}, []
            )
            metrics = {"actor/pg_loss": 0.5, **{f"timing_s/{k}": v for k, v in timing_raw.items()}}
            logger.log(data={**metrics, **{k: float(v) for k, v in val.items()}}, step=1)
            report = logger.finish()
            return {"kind": kind, "complete": report.complete, "val_keys": sorted(val), "warnings": warnings}

    result = ray.get(TaskRunner.remote().run.remote(config_yaml))
    with open(out, "w") as f:
        json.dump(result, f)
    """
)


def test_verl_trainer_in_a_ray_actor_logs_through_the_setup_hook(ray_cluster: RayCluster, tmp_path: Path) -> None:
    import ray
    from omegaconf import OmegaConf
    from verl.workers.config.rollout import PrometheusConfig
    from verl.workers.rollout.utils import update_prometheus_config

    if socket.gethostbyname(socket.gethostname()) != "127.0.0.1":
        pytest.skip("verl's writer reloads Prometheus at this host's address, which is not 127.0.0.1 here")
    if not _loopback_only_ray_sd_file():
        pytest.skip("verl's Ray service-discovery file lists non-loopback targets Prometheus would scrape")

    served = verl_served_model_name(MODEL_PATH)
    assert served is not None
    policy = [Replica(model_name=served), Replica(model_name=served)]
    other = Replica(model_name="reference")
    replicas = [*policy, other]
    prometheus = PrometheusServer(
        tmp_path / "prometheus",
        config_override={"global": {"scrape_interval": "1s"}, "scrape_configs": []},
        enable_lifecycle=True,
    )
    run_dir = tmp_path / "runs"
    bridge_yaml = tmp_path / "otel-bridge.yaml"
    bridge_yaml.write_text(yaml.safe_dump({"run": {"dir": str(run_dir), "name": "adopted"}}), encoding="utf-8")
    try:
        prometheus.start()
        # verl's rollout start-up registers its servers with Prometheus (verl/workers/rollout/llm_server.py)
        update_prometheus_config(
            PrometheusConfig(enable=True, port=prometheus.port, file=str(prometheus.config_path)),
            [r.hostport for r in replicas],
            "vllm",
        )
        _wait_for(
            lambda: _rollout_targets(prometheus) == {r.hostport for r in replicas}, "verl's targets", 15, prometheus
        )
        _wait_for(
            lambda: len(prometheus.query("vllm:num_requests_running")) == len(replicas),
            "a scrape of every rollout server",
            40,
            prometheus,
        )
        config = compose_verl_config(
            [
                *documented_overrides(bridge_yaml, prometheus.port, prometheus.config_path),
                "trainer.logger=[file]",
                "trainer.project_name=adopt",
                "trainer.experiment_name=verl-actor",
            ]
        )
        runtime_env = verl_runtime_env(config)
        # the tests talk to 127.0.0.1 only: `auto` (verl's Prometheus on the Ray head) is pointed at loopback
        runtime_env["env_vars"][ENV_PROMETHEUS_URL] = prometheus.url
        runtime_env["env_vars"]["VERL_FILE_LOGGER_PATH"] = str(tmp_path / "verl-file.jsonl")
        runtime_env.pop("py_executable", None)
        out = tmp_path / "result.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_BRIDGE")}
        serving = threading.Event()

        def serve() -> None:  # every server completes requests all along, the policy's 7 tokens each
            while not serving.wait(0.1):
                for replica in policy:
                    _finish_requests(replica, count=1, tokens=POLICY_TOKENS)
                _finish_requests(other, count=1, tokens=OTHER_TOKENS)

        load = threading.Thread(target=serve, daemon=True)
        load.start()
        try:
            done = subprocess.run(
                [
                    sys.executable, "-c", ACTOR_SCRIPT, ray.get_runtime_context().gcs_address,
                    json.dumps(runtime_env), OmegaConf.to_yaml(config, resolve=True), str(out),
                ],
                capture_output=True, text=True, timeout=600, check=False, env=env,
            )  # fmt: skip
        finally:
            serving.set()
            load.join()
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    finally:
        prometheus.stop()
        for replica in replicas:
            replica.stop()

    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["kind"] is True, "verl built otel-bridge's Tracking"
    # verl's prometheus.yml scrapes every 10s: gauges have a value only in steps holding a scrape, which the bridge
    # says; nothing else is warned about (no late or unused patch)
    assert all("a gauge has a value only in steps holding a scrape" in w for w in result["warnings"]), result
    assert result["complete"] is True
    assert "val-core/gsm8k/reward/mean@2" in result["val_keys"]
    lines = [json.loads(x) for x in (tmp_path / "verl-file.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [line["step"] for line in lines] == [0, 1]
    record = lines[1]
    for key in result["val_keys"]:
        assert key in record, f"verl's validation key {key} reaches the tracker unchanged"
    assert record["timing_s/gen"] > 0
    assert record["phase/gen/seconds"] >= 1.5
    assert record["phase/update_actor/seconds"] >= 1.0
    # the policy model's servers only, matched by the name verl serves it under: 7 tokens a request, none of the
    # other model's 1000
    assert record[REQUESTS] > 0, record
    assert record[TOKENS] == POLICY_TOKENS * record[REQUESTS], record
