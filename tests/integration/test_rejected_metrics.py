"""A configured metric that a real Prometheus rejects or does not know is named at start-up: its entry, Prometheus'
words, the column in the user's own expression, the closest existing name (issue 16, points 7 and 8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_bridge import Bridge
from otel_bridge.errors import ConfigError
from tests.cli.support import run_cli
from tests.conftest import Replica
from tests.helpers.prometheus_server import PROMETHEUS_VERSIONS, PrometheusServer

pytestmark = pytest.mark.integration

BAD = "sum(rate(vllm:generation_tokens_total[$window])) by (model_name"  # the closing parenthesis is missing


@pytest.fixture(scope="module", params=PROMETHEUS_VERSIONS, ids=[f"prometheus-{v}" for v in PROMETHEUS_VERSIONS])
def prometheus(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> PrometheusServer:
    replica = Replica()
    server = PrometheusServer(tmp_path_factory.mktemp("prom"), [replica.hostport], version=request.param)
    try:
        server.start()
        server.wait_for_samples("vllm:generation_tokens_total")
        yield server  # type: ignore[misc]
    finally:
        server.stop()
        replica.stop()


def start(prometheus: PrometheusServer, tmp_path: Path, metrics: list[dict[str, object]]) -> ConfigError:
    config = {"prometheus": {"url": prometheus.url}, "metrics": metrics, "run": {"dir": str(tmp_path / "runs")}}
    with pytest.raises(ConfigError) as error:
        Bridge.from_config(config)
    return error.value


def test_a_rejected_expression_names_its_entry_and_the_column_in_it(
    prometheus: PrometheusServer, tmp_path: Path
) -> None:
    good = {"name": "vllm:num_requests_running", "type": "gauge"}
    message = str(start(prometheus, tmp_path, [good, {"promql": BAD, "alias": "tokens_by_model"}]))
    assert message.startswith("metrics[1] (tokens_by_model): Prometheus rejects its promql (bad_data: 1:")
    # Prometheus points at the end of the user's expression (where the parenthesis is missing), not into the union.
    assert f"1:{len(BAD) + 1}: parse error" in message
    assert "label_replace" not in message
    assert "otel_bridge_q" not in message


def test_a_misspelt_metric_without_type_is_named_with_the_closest_name(
    prometheus: PrometheusServer, tmp_path: Path
) -> None:
    message = str(start(prometheus, tmp_path, [{"name": "vllm:generation_token_total"}]))
    assert message.startswith("metrics[0] vllm:generation_token_total: Prometheus does not know this metric")
    assert "did you mean vllm:generation_tokens_total?" in message
    assert "set type" in message  # the other reason a name has no metadata: remote-written series


def test_query_with_a_bad_expression_speaks_of_the_expression_not_of_a_config(
    prometheus: PrometheusServer, tmp_path: Path
) -> None:
    expr = BAD.replace("$window", "1m")
    done = run_cli(["query", expr, "--prometheus-url", prometheus.url], cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert "Prometheus rejects the expression (bad_data: 1:" in done.stderr
    assert f"1:{len(expr) + 1}: parse error" in done.stderr
    assert "metrics[" not in done.stderr
    assert "configured" not in done.stderr
