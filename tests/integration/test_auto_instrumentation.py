"""Under ``opentelemetry-instrument`` (the OpenTelemetry distro configures the global MeterProvider from OTEL_*
variables), the application hands that provider to the bridge: the distro's periodic OTLP export and the bridge's
per-step records receive the same instrument (issue 15, "your own provider"). Real subprocess, real distro, real
OTLP/HTTP receiver on 127.0.0.1 decoding protobuf."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli.support import cli_env
from tests.unit.test_own_meter_provider import decoded, otlp_receiver, points

pytestmark = pytest.mark.integration

APP = textwrap.dedent(
    """
    import sys
    from opentelemetry import metrics
    from otel_bridge import Bridge

    provider = metrics.get_meter_provider()  # set up by opentelemetry-instrument from the OTEL_* variables
    bridge = Bridge.from_config(
        {"trackers": [{"type": "jsonl"}], "run": {"name": "auto", "dir": sys.argv[1]}}, meter_provider=provider
    )
    samples = metrics.get_meter("user.app").create_counter("user.samples")
    for step in range(3):
        with bridge.step(step):
            samples.add(5)
    assert bridge.close().complete
    assert provider.force_flush()
    """
)


def test_the_distros_provider_feeds_its_otlp_export_and_the_step_records(tmp_path: Path) -> None:
    instrument = shutil.which("opentelemetry-instrument", path=str(Path(sys.executable).parent))
    if instrument is None:
        pytest.skip("opentelemetry-instrument is not installed (pip install 'otel-bridge[dev]')")
    (tmp_path / "app.py").write_text(APP, encoding="utf-8")
    with otlp_receiver() as receiver:
        env = cli_env(
            {
                "OTEL_METRICS_EXPORTER": "otlp",
                "OTEL_TRACES_EXPORTER": "none",
                "OTEL_LOGS_EXPORTER": "none",
                "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": f"{receiver.url}/v1/metrics",
                "OTEL_METRIC_EXPORT_INTERVAL": "3600000",
                "OTEL_SERVICE_NAME": "auto-app",
                "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "requests,urllib3",
            }
        )
        env.pop("OTEL_SDK_DISABLED", None)
        done = subprocess.run(
            [instrument, sys.executable, "app.py", str(tmp_path / "runs")],
            cwd=tmp_path, env={**os.environ, **env}, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        exports = decoded(receiver)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = (tmp_path / "runs" / "auto" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line).get("user/samples") for line in lines] == [5.0, 10.0, 15.0]
    assert exports, "the distro's exporter sent nothing"
    [(_, counter)] = points(exports[-1])["user.samples"]
    assert counter.as_int == 15
    resource = {a.key: a.value.string_value for a in exports[-1].resource_metrics[0].resource.attributes}
    assert resource["service.name"] == "auto-app"
