"""The verl integration against the real ``verl`` package (0.9.x, a dev extra), not against look-alikes.

- verl's rollout ``PrometheusConfig`` and its writer ``verl.workers.rollout.utils.update_prometheus_config``: the
  writer runs Ray tasks that rewrite ``PrometheusConfig.file`` on every node and ``POST /-/reload`` to Prometheus at
  ``<this host's address>:<port>``; here that is a real Prometheus started with ``--web.enable-lifecycle`` on
  127.0.0.1, on the session's local Ray cluster. The bridge, configured from the same ``PrometheusConfig`` with
  :func:`bridge_config_from_verl`, must then read the rollout servers verl registered (simulated vLLM servers).
- verl's ``Tracking``: our drop-in accepts every argument of its signature, every name of its
  ``supported_backend`` either maps or is refused by name, ``file`` writes where verl's ``FileLogger`` writes, and
  ``rl_insight`` is verl's own ``RLInsightLogger``.

verl's modules import torch and transformers (about 20 s on 2 cores), so they are imported inside the tests.
"""

from __future__ import annotations

import inspect
import json
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import requests
import yaml

from otel_bridge import Bridge
from otel_bridge.config import AUTO, ENV_PROMETHEUS_URL
from otel_bridge.discovery import resolve_prometheus_url
from otel_bridge.errors import ConfigError
from otel_bridge.integrations.verl import (
    RL_INSIGHT,
    UNSUPPORTED_VERL_BACKENDS,
    VERL_BACKENDS,
    Tracking,
    bridge_config_from_verl,
    verl_file_logger_path,
    verl_trackers,
)
from tests.conftest import Replica
from tests.helpers.prometheus_server import PrometheusServer

if TYPE_CHECKING:
    from tests.ray_fixtures import RayCluster

pytestmark = pytest.mark.integration

# verl's writer also lists this fixed file as the `ray` job's service discovery (verl/workers/rollout/utils.py).
VERL_RAY_SD_FILE = Path("/tmp/ray/prom_metrics_service_discovery.json")
TOKENS = "rollout/vllm/generation_tokens_total/delta"
REQUESTS = "rollout/vllm/request_success_total/delta"
BAND_S = 0.5  # a boundary scrape reaches the servers this long after the boundary at most (test_boundary_truth: 0.3)


def _loopback_only_ray_sd_file() -> bool:
    """True when Prometheus, reloaded with verl's config, scrapes no `ray` target outside 127.0.0.0/8."""
    try:
        groups = json.loads(VERL_RAY_SD_FILE.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return True
    except (OSError, ValueError):
        return False
    targets = [str(t) for group in groups for t in group.get("targets", [])]
    return all(t.startswith("127.") or t.startswith("localhost:") for t in targets)


def _rollout_targets(prometheus: PrometheusServer) -> set[str]:
    body = requests.get(f"{prometheus.url}/api/v1/targets", params={"state": "active"}, timeout=10).json()
    return {t["labels"]["instance"] for t in body["data"]["activeTargets"] if t["labels"].get("job") == "rollout"}


def _wait_for(predicate: Any, what: str, timeout_s: float, prometheus: PrometheusServer) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"{what} not seen within {timeout_s}s; Prometheus log: {prometheus.log_tail()}")


def _finish_requests(replica: Replica, count: int, tokens: int) -> None:
    for _ in range(count):
        replica.sim.complete_request(
            prompt_tokens=20, generation_tokens=tokens, ttft_s=0.05, e2e_s=0.2, queue_s=0.01, itl_s=0.01
        )


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_bridge_reads_the_rollout_servers_verl_registered_in_prometheus(
    ray_cluster: RayCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prometheus_version: str
) -> None:
    from verl.workers.config.rollout import PrometheusConfig
    from verl.workers.rollout.utils import update_prometheus_config

    if socket.gethostbyname(socket.gethostname()) != "127.0.0.1":
        pytest.skip("verl's writer reloads Prometheus at this host's address, which is not 127.0.0.1 here")
    if not _loopback_only_ray_sd_file():
        pytest.skip(f"{VERL_RAY_SD_FILE} (named by verl's config) lists non-loopback targets Prometheus would scrape")

    policy = [Replica(model_name="policy"), Replica(model_name="policy")]
    other = Replica(model_name="reference")  # another model on the same Prometheus: served_model_name leaves it out
    replicas = [*policy, other]
    for replica, running in zip(replicas, (2, 3, 9), strict=True):
        replica.sim.set_running(running)
        replica.sim.set_waiting(0)
        replica.sim.set_kv_cache_usage(0.25)
    prometheus = PrometheusServer(
        tmp_path / "prometheus",
        config_override={"global": {"scrape_interval": "10s"}, "scrape_configs": []},
        enable_lifecycle=True,
        version=prometheus_version,
    )
    try:
        prometheus.start()
        verl_config = PrometheusConfig(
            enable=True, port=prometheus.port, file=str(prometheus.config_path), served_model_name="policy"
        )
        assert _rollout_targets(prometheus) == set()

        update_prometheus_config(verl_config, [r.hostport for r in replicas], "vllm")

        written = yaml.safe_load(prometheus.config_path.read_text(encoding="utf-8"))
        assert written["global"]["scrape_interval"] == "10s"
        rollout_jobs = [job for job in written["scrape_configs"] if job["job_name"] == "rollout"]
        assert rollout_jobs == [
            {"job_name": "rollout", "static_configs": [{"targets": [r.hostport for r in replicas]}]}
        ]
        # verl swallows a failed reload (it only logs), so the reload is checked on Prometheus itself.
        _wait_for(
            lambda: _rollout_targets(prometheus) == {r.hostport for r in replicas},
            "verl's rollout targets",
            15,
            prometheus,
        )
        _wait_for(
            lambda: len(prometheus.query("vllm:generation_tokens_total")) == len(replicas),
            "a scrape of every rollout server",
            40,
            prometheus,
        )

        config = bridge_config_from_verl(
            verl_config, trackers=[{"type": "jsonl"}], run={"name": "verl", "dir": str(tmp_path / "runs")}
        )
        assert (config.prometheus.url, config.prometheus.ray_port) == (AUTO, prometheus.port)
        assert config.prometheus.scrape_interval_s == 10.0, "read from the file verl wrote"
        # Without an environment override, `auto` is verl's Prometheus on the Ray head (resolved, not contacted).
        head = resolve_prometheus_url(AUTO, environ={}, ray_port=config.prometheus.ray_port)
        assert head.url == f"http://{ray_cluster.head_address}:{prometheus.port}"
        # The tests talk to 127.0.0.1 only: the environment points `auto` at the same Prometheus on loopback.
        monkeypatch.setenv(ENV_PROMETHEUS_URL, prometheus.url)

        bridge = Bridge.from_config(config)
        try:
            bridge.log({"actor/pg_loss": 0.5}, step=0)
            time.sleep(BAND_S)  # the boundary's own scrape of the servers runs on a worker, just after log()
            for replica in policy:
                _finish_requests(replica, count=5, tokens=7)
            _finish_requests(other, count=3, tokens=11)
            bridge.log({"actor/pg_loss": 0.4}, step=1)
        finally:
            report = bridge.close()
        assert report.complete, report
    finally:
        prometheus.stop()
        for replica in replicas:
            replica.stop()

    lines = _read_jsonl(tmp_path / "runs" / "verl" / "metrics.jsonl")
    assert [line["step"] for line in lines] == [0, 1]
    record = lines[1]
    assert record["actor/pg_loss"] == 0.4
    # Exact, from the servers' own counters at both boundaries: the bridge scraped the targets verl registered.
    assert record.get(TOKENS) == 2 * 5 * 7, f"the policy servers' tokens of step 1 only: {record}"
    assert record.get(REQUESTS) == 2 * 5, record
    prefix = "otel_bridge/scrape_errors/instance."
    scraped = {key.removeprefix(prefix) for key in record if key.startswith(prefix)}
    assert scraped == {r.hostport.replace(":", "_") for r in replicas}, "every server verl registered, no other"


# -- Tracking ----------------------------------------------------------------------------------------------------


def test_tracking_accepts_verls_signature_and_backend_names(tmp_path: Path) -> None:
    from verl.utils.tracking import Tracking as VerlTracking

    for name in ("__init__", "log", "finish"):
        ours = inspect.signature(getattr(Tracking, name)).parameters
        for param in inspect.signature(getattr(VerlTracking, name)).parameters.values():
            assert param.name in ours, f"verl's Tracking.{name} has {param.name!r}; ours does not"
            assert ours[param.name].default == param.default, f"Tracking.{name}({param.name}=...) default differs"
            assert ours[param.name].kind in (param.kind, inspect.Parameter.POSITIONAL_OR_KEYWORD)

    verl_names = set(VerlTracking.supported_backend)
    assert {"file", RL_INSIGHT} <= verl_names, "verl 0.9's names"
    assert verl_names <= set(VERL_BACKENDS) | {RL_INSIGHT} | set(UNSUPPORTED_VERL_BACKENDS)
    assert set(Tracking.supported_backend) == (verl_names | {"jsonl", "tracking"}) - set(UNSUPPORTED_VERL_BACKENDS)
    for name in UNSUPPORTED_VERL_BACKENDS:
        with pytest.raises(ConfigError, match=f"{name!r}: verl backend with no otel-bridge tracker"):
            verl_trackers([name], "p", "e")

    # verl's v1 trainer (verl/trainer/main_ppo.py) ends with finish(exit_code=...).
    tracking = Tracking("p", "e", "jsonl", bridge_config={"run": {"dir": str(tmp_path)}})
    tracking.log({"actor/pg_loss": 1.0}, step=0)
    assert tracking.finish(exit_code=1).complete


def test_file_backend_writes_where_verls_file_logger_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from verl.utils.tracking import Tracking as VerlTracking

    monkeypatch.setenv("VERL_FILE_LOGGER_ROOT", str(tmp_path / "verl-files"))
    verl_tracking = VerlTracking("proj", "exp-1", default_backend="file")
    verl_path = Path(verl_tracking.logger["file"].filepath)
    verl_tracking.log({"actor/pg_loss": 1.0}, step=1)
    verl_tracking.finish()
    assert _read_jsonl(verl_path) == [{"step": 1, "data": {"actor/pg_loss": 1.0}}]
    verl_path.unlink()

    assert verl_file_logger_path("proj", "exp-1") == verl_path.absolute()
    with Tracking("proj", "exp-1", ["file", "console"], bridge_config={"run": {"dir": str(tmp_path / "runs")}}) as ours:
        assert set(ours.logger) == {"jsonl", "console"}
        ours.log({"actor/pg_loss": 1.0}, step=1)
        ours.log({"actor/pg_loss": 0.5, "val-core/acc": 0.25}, step=2)
    lines = _read_jsonl(verl_path)
    assert [(line["step"], line["actor/pg_loss"]) for line in lines] == [(1, 1.0), (2, 0.5)]
    assert lines[1]["val-core/acc"] == 0.25
    assert not (tmp_path / "runs" / "proj" / "exp-1" / "metrics.jsonl").exists(), "file replaces the run dir's jsonl"

    explicit = tmp_path / "explicit.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(explicit))
    verl_tracking = VerlTracking("proj", "exp-2", default_backend="file")
    assert Path(verl_tracking.logger["file"].filepath) == explicit
    verl_tracking.finish()
    assert verl_file_logger_path("proj", "exp-2") == explicit


def test_rl_insight_is_verls_own_logger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from verl.utils.tracking import RLInsightLogger

    monkeypatch.delenv("VERL_RL_INSIGHT_ENABLE", raising=False)
    bridge_config = {"run": {"dir": str(tmp_path)}}
    with Tracking("p", "e", ["jsonl", RL_INSIGHT], bridge_config=bridge_config) as tracking:
        assert isinstance(tracking._rl_insight, RLInsightLogger)
        assert set(tracking.logger) == {"jsonl"}, "rl_insight is no otel-bridge tracker"
        tracking.log({"actor/pg_loss": 1.0, "note": "text"}, step=0)  # disabled, as in verl: nothing happens
        tracking.log({"actor/pg_loss": 0.5}, step=1)
    assert [line["actor/pg_loss"] for line in _read_jsonl(tmp_path / "p" / "e" / "metrics.jsonl")] == [1.0, 0.5]

    # Enabled without the rl-insight package: verl's logger cannot import it, which start-up says with the fix.
    if _importable("rl_insight"):
        pytest.skip("rl-insight is installed here")
    monkeypatch.setenv("VERL_RL_INSIGHT_ENABLE", "1")
    with pytest.raises(ConfigError, match=r"'rl_insight' .*pip install rl-insight.*VERL_RL_INSIGHT_ENABLE"):
        Tracking("p", "e2", [RL_INSIGHT], bridge_config=bridge_config)


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
