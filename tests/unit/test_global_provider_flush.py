"""The issue's reproduction, through the global provider as OTel user code reaches it after ``install()``:
``get_meter_provider().force_flush()`` inside a step keeps the step's histogram; ``get_meter_provider().shutdown()``
at the end delivers the last, still open step. The global MeterProvider is set once per process: a subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

USER_CODE = textwrap.dedent(
    """
    import json, sys
    import otel_bridge
    from opentelemetry import metrics

    bridge = otel_bridge.install({"run": {"name": "flush", "dir": sys.argv[1]}}, handle_sigterm=False)
    meter = metrics.get_meter("user.code")
    h = meter.create_histogram("h")
    c = meter.create_counter("n")
    with bridge.step(1):
        h.record(5)
        h.record(7)
        c.add(2)
        flushed = metrics.get_meter_provider().force_flush()
    first = bridge.collect(1)
    with bridge.step(2):
        h.record(1)
    metrics.get_meter_provider().shutdown()   # step 2's record is still open here
    print(json.dumps({"flushed": flushed, "first": first, "report_complete": bridge.close().complete}))
    """
)


def test_global_force_flush_and_shutdown_from_user_code(tmp_path: Path) -> None:
    script = tmp_path / "user_code.py"
    script.write_text(USER_CODE)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "runs")], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["flushed"] is True
    assert out["first"]["n"] == 2.0
    assert (out["first"]["h/count"], out["first"]["h/sum"]) == (2.0, 12.0)
    assert out["report_complete"] is True
    lines = [json.loads(line) for line in (tmp_path / "runs" / "flush" / "metrics.jsonl").read_text().splitlines()]
    assert [(line["step"], line["h/count"]) for line in lines] == [(1, 2.0), (2, 1.0)]
    assert done.stderr == "", "no warning (e.g. a second shutdown) and no error"
