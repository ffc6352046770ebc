"""bridge_config_from_verl: verl's rollout PrometheusConfig fields map onto the bridge's config."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from otel_bridge.integrations.verl import bridge_config_from_verl, verl_bridge_config, verl_served_model_name
from otel_bridge.producers.metric_set import resolve_metrics


@dataclass
class PrometheusConfig:
    """The shape of verl's ``verl.workers.config.rollout.PrometheusConfig``."""

    enable: bool = False
    port: int = 9090
    file: str = "/tmp/ray/session_latest/metrics/prometheus/prometheus.yml"
    served_model_name: str | None = None


def test_disabled_means_no_infrastructure_metrics() -> None:
    config = bridge_config_from_verl(PrometheusConfig(enable=False))
    assert config.metrics == []
    assert config.resolved_source() is None


def test_enabled_reads_the_ray_head_prometheus_and_its_scrape_interval(tmp_path: Path) -> None:
    prometheus_yml = tmp_path / "prometheus.yml"
    prometheus_yml.write_text("global:\n  scrape_interval: 10s\nscrape_configs: []\n")
    verl = PrometheusConfig(enable=True, port=9191, file=str(prometheus_yml), served_model_name="policy")
    config = bridge_config_from_verl(verl, trackers=[{"type": "jsonl"}])
    assert config.prometheus.url == "auto"
    assert config.prometheus.ray_port == 9191
    assert config.prometheus.scrape_interval_s == 10.0
    queries = resolve_metrics(config.metrics)
    assert {q.key_name for q in queries} >= {"vllm:generation_tokens_total", "vllm:prefix_cache_hit_rate"}
    assert all(dict(q.matchers) == {"model_name": "policy"} for q in queries)
    assert config.naming.infra_prefix == "rollout"


def test_metrics_to_log_and_prefix_from_a_mapping() -> None:
    verl = {"enable": True, "port": 9090, "metrics_to_log": ["vllm:num_requests_running"], "file": "/nonexistent"}
    config = bridge_config_from_verl(verl, prefix="infra")
    assert [m.name for m in config.metrics] == ["vllm:num_requests_running"]
    assert config.naming.infra_prefix == "infra"
    assert config.prometheus.scrape_interval_s == 15.0  # the file is absent: Prometheus' default stays


@pytest.mark.parametrize(
    ("served_model_name", "label"),
    [
        ("~/models/deepseek-llm-7b-chat", "deepseek-llm-7b-chat"),  # verl's default: actor_rollout_ref.model.path
        ("/data/ckpt/Qwen/Qwen2.5-0.5B-Instruct", "Qwen2.5-0.5B-Instruct"),
        ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen2.5-0.5B-Instruct"),  # a Hugging Face id: vLLM serves the last part
        ("policy", "policy"),
    ],
)
def test_the_model_is_matched_by_the_name_verl_serves_it_under(served_model_name: str, label: str) -> None:
    """Issue 26: verl starts vLLM/SGLang with ``served_model_name.split("/")[-1]`` (vllm_async_server.py)."""
    config = bridge_config_from_verl(PrometheusConfig(enable=True, served_model_name=served_model_name))
    assert verl_served_model_name(served_model_name) == label
    assert all(dict(q.matchers) == {"model_name": label} for q in resolve_metrics(config.metrics))


def test_tracking_takes_the_infrastructure_from_verls_own_config_when_the_bridge_config_names_none() -> None:
    verl_config = {
        "actor_rollout_ref": {
            "rollout": {"prometheus": {"enable": True, "port": 9191, "served_model_name": "/m/policy-7b"}}
        }
    }
    config = verl_bridge_config(
        {}, project_name="p", experiment_name="e", default_backend="console", config=verl_config
    )
    assert (config.prometheus.url, config.prometheus.ray_port) == ("auto", 9191)
    assert {m.labels["model_name"] for m in config.metrics} == {"policy-7b"}
    # a bridge config that reads /metrics directly keeps its source; its own metrics are kept
    own = {"scrape": {"targets": ["127.0.0.1:8000"]}, "metrics": [{"name": "vllm:num_requests_running"}]}
    config = verl_bridge_config(
        own, project_name="p", experiment_name="e", default_backend="console", config=verl_config
    )
    assert config.resolved_source() == "scrape"
    assert config.prometheus.url is None
    assert [m.name for m in config.metrics] == ["vllm:num_requests_running"]
