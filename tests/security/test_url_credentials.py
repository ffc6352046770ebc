"""A password written into a URL never appears in a configuration error or a repr (issue 27 finding 9, the library's
half; ``doctor`` and ``init`` are the CLI's).

Before: ``ConfigError`` printed ``http://user:password@host`` for ``prometheus.url`` with a bad port, a mistyped
scheme or given as a list, for ``otel.otlp.endpoint`` with a bad port and for ``scrape.targets`` written as a mapping;
``repr(BridgeConfig)`` held it. Real files too: the file path adds line numbers to the same messages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from otel_bridge import BridgeConfig
from otel_bridge.errors import ConfigError

PASSWORD = "pw-27/SECRET"
URL = f"http://admin:{PASSWORD}@prom.example:9090"

SHAPES: dict[str, dict[str, Any]] = {
    "prometheus.url with a bad port": {"prometheus": {"url": f"http://admin:{PASSWORD}@prom.example:99999"}},
    "prometheus.url with a mistyped scheme": {"prometheus": {"url": f"htp://admin:{PASSWORD}@prom.example:9090"}},
    "prometheus.url without the scheme's colon": {"prometheus": {"url": f"http//admin:{PASSWORD}@prom.example"}},
    "prometheus.url as a list": {"prometheus": {"url": [URL]}},
    "prometheus.url, otherwise valid": {"prometheus": {"url": URL}},
    "otel.otlp.endpoint with a bad port": {
        "otel": {"otlp": {"enabled": True, "endpoint": f"http://admin:{PASSWORD}@collector:99999/v1/metrics"}}
    },
    "otel.otlp.endpoint, otherwise valid": {
        "otel": {"otlp": {"enabled": True, "endpoint": f"http://admin:{PASSWORD}@collector:4318/v1/metrics"}}
    },
    "scrape.targets as a mapping": {"scrape": {"targets": {"vllm": f"http://admin:{PASSWORD}@vllm:8000/metrics"}}},
    "scrape.targets with a token as the user": {"scrape": {"targets": [f"http://{PASSWORD}@vllm:8000/metrics"]}},
    "a username-only URL with a bad port": {"prometheus": {"url": f"http://{PASSWORD}@prom.example:99999"}},
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_config_error_never_shows_the_password_of_a_url(shape: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        BridgeConfig.load(SHAPES[shape], environ={})
    assert PASSWORD not in str(raised.value)
    assert "prometheus" in str(raised.value) or "otlp" in str(raised.value) or "scrape" in str(raised.value)
    path = tmp_path / "otel-bridge.yaml"
    path.write_text(yaml.safe_dump(SHAPES[shape]))
    with pytest.raises(ConfigError) as from_file:
        BridgeConfig.load(path, environ={})
    assert PASSWORD not in str(from_file.value)
    assert "line " in str(from_file.value)


def test_credentials_in_a_service_url_are_refused_saying_where_they_go() -> None:
    with pytest.raises(ConfigError, match=r"prometheus\.auth\.username.*password_env"):
        BridgeConfig.load({"prometheus": {"url": URL}}, environ={})
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_HEADERS"):
        BridgeConfig.load({"otel": {"otlp": {"enabled": True, "endpoint": f"http://u:{PASSWORD}@c:4318"}}}, environ={})


def test_the_repr_of_a_config_never_shows_the_password_of_a_url() -> None:
    config = BridgeConfig.load(
        {"trackers": [{"type": "mlflow", "tracking_uri": f"https://admin:{PASSWORD}@mlflow.example"}]}, environ={}
    )
    assert "mlflow.example" in repr(config)
    assert PASSWORD not in repr(config)
    assert PASSWORD not in str(config)
    assert PASSWORD not in repr(config.trackers[0])
    assert config.trackers[0].options()["tracking_uri"].endswith(f":{PASSWORD}@mlflow.example")  # the value is kept
