"""otel_bridge.install(): plain OpenTelemetry user code lands in the tracker record, on /metrics and over OTLP/HTTP.

The global MeterProvider can be set once per process, so the user code runs in a subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer

USER_CODE = textwrap.dedent(
    """
    import json, sys
    import requests
    import otel_bridge
    from opentelemetry import metrics

    bridge = otel_bridge.install({
        "run": {"name": "install", "dir": sys.argv[1]},
        "otel": {
            "service_name": "my-trainer",
            "rank": 0,
            "prometheus": {"enabled": True, "port": 0},
            "otlp": {"enabled": True, "endpoint": sys.argv[2], "interval_s": 60},
        },
    })
    samples = metrics.get_meter("user.code").create_counter("user.samples", description="samples seen")
    samples.add(5, {"split": "train"})
    bridge.log({"actor/loss": 0.25}, step=0)
    record = bridge.collect(0)
    exposition = requests.get(bridge.metrics_url, timeout=10).text
    try:
        otel_bridge.install({"run": {"name": "again", "dir": sys.argv[1]}})
        second = "installed twice"
    except otel_bridge.ConfigError as exc:
        second = str(exc)
    bridge.close()
    print(json.dumps({"record": record, "exposition": exposition, "metrics_url": bridge.metrics_url, "second": second}))
    """
)


def run_user_code(tmp_path: Path, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``code`` as a script of its own process (the global MeterProvider is set once per process), with ``args``."""
    script = tmp_path / "user_code.py"
    script.write_text(code)
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_install_routes_plain_otel_code_everywhere(tmp_path: Path) -> None:

    def receive(request: RecordedRequest) -> Response:
        return Response(
            200, ExportMetricsServiceRequest().SerializeToString(), {"Content-Type": "application/x-protobuf"}
        )

    with ScriptedHTTPServer(receive) as receiver:
        done = run_user_code(tmp_path, USER_CODE, str(tmp_path / "runs"), f"{receiver.url}/v1/metrics")
        pushes = [r for r in receiver.requests if r.method == "POST" and r.path == "/v1/metrics"]  # not /v1/traces
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])

    assert out["record"]["user/samples/split.train"] == 5
    assert out["record"]["actor/loss"] == 0.25
    assert out["metrics_url"].startswith("http://127.0.0.1:")
    exposed = [line for line in out["exposition"].splitlines() if line.startswith("user_samples_total{")]
    assert len(exposed) == 1, out["exposition"]
    assert 'split="train"' in exposed[0]
    assert exposed[0].endswith(" 5.0")
    assert "already set" in out["second"]

    assert pushes, "close() must flush the OTLP exporter"
    request = ExportMetricsServiceRequest()
    request.ParseFromString(pushes[-1].body)
    resource = {
        a.key: a.value.string_value or a.value.int_value for a in request.resource_metrics[0].resource.attributes
    }
    assert resource["service.name"] == "my-trainer"
    assert resource["otel_bridge.rank"] == 0
    points = [
        (m.name, p.as_int, {a.key: a.value.string_value for a in p.attributes})
        for rm in request.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        for p in m.sum.data_points
    ]
    assert ("user.samples", 5, {"split": "train"}) in points


REFUSED = textwrap.dedent(
    """
    import json, sys
    import otel_bridge
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider

    metrics.set_meter_provider(MeterProvider())  # the application configured OpenTelemetry first
    trackers = [{"type": "jsonl"}, {"type": "tensorboard"}, {"type": "mlflow", "tracking_uri": sys.argv[2]}]
    try:
        otel_bridge.install({"run": {"name": "refused", "dir": sys.argv[1]}, "trackers": trackers})
        print(json.dumps({"error": None}))
    except otel_bridge.ConfigError as exc:
        print(json.dumps({"error": str(exc)}))
    """
)


def test_install_over_a_provider_already_set_refuses_before_creating_any_run(tmp_path: Path) -> None:
    """Issue 16 point 5 for install(): refused because the application set its own global MeterProvider first, it
    leaves no empty tracker run behind (nor OTel's 'Overriding of current MeterProvider' warning), and says the way
    forward (issue 15 section 2)."""
    store = tmp_path / "mlflow.db"
    done = run_user_code(tmp_path, REFUSED, str(tmp_path / "runs"), f"sqlite:///{store}")
    assert done.returncode == 0, done.stderr
    error = json.loads(done.stdout.strip().splitlines()[-1])["error"]
    assert error is not None
    assert "already set" in error
    assert "Bridge.from_config(config, meter_provider=opentelemetry.metrics.get_meter_provider())" in error
    assert not (tmp_path / "runs").exists(), sorted(str(p) for p in (tmp_path / "runs").rglob("*"))
    assert not store.exists(), "an MLflow run was opened"
    assert "Overriding" not in done.stderr, done.stderr
