"""Who reads the scrape targets and the PromQL path's boundary readings (scrape.readers): the choice, and what node
agents refuse at build time."""

from __future__ import annotations

import pytest

from otel_bridge.config import BridgeConfig
from otel_bridge.errors import ConfigError
from otel_bridge.pipeline.build import scrape_readers
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.scrape import NodeAgents


def config(**scrape: object) -> BridgeConfig:
    return BridgeConfig.model_validate({"metrics": [{"name": "x_total", "type": "counter"}], "scrape": scrape})


def test_static_targets_are_read_by_the_trainer_unless_node_agents_are_asked_for() -> None:
    assert scrape_readers(config(targets=["127.0.0.1:8000"])) == "trainer"
    assert scrape_readers(config(targets=["127.0.0.1:8000"], readers="trainer")) == "trainer"
    assert scrape_readers(config(targets="auto", readers="trainer")) == "trainer"


def test_a_readers_value_is_checked() -> None:
    with pytest.raises(ValueError, match="readers"):
        config(targets=["127.0.0.1:8000"], readers="nodes")


def test_node_agents_need_every_metrics_type() -> None:
    untyped = MetricQuery(key_name="x", name="x_total", kind=None, stats=("delta",), source_index=2)
    with pytest.raises(ConfigError, match=r"metrics\[2\] x_total has none: set its type"):
        NodeAgents(["127.0.0.1:8000"], [untyped])


def test_the_promql_paths_boundary_readings_are_the_trainers_without_ray() -> None:
    """The PromQL path's targets are Prometheus' (discovered): ``auto`` asks Ray, and without it the trainer reads
    (within ``prometheus.boundary_max_targets``); node agents asked for without Ray are refused."""
    promql = {"metrics": [{"name": "x_total", "type": "counter"}], "prometheus": {"url": "http://127.0.0.1:9090"}}
    assert scrape_readers(BridgeConfig.model_validate(promql)) == "trainer"
    with pytest.raises(ConfigError, match="Ray is not initialised"):
        scrape_readers(BridgeConfig.model_validate({**promql, "scrape": {"readers": "node_agents"}}))
