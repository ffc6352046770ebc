"""The trainer's clock and Prometheus' disagree (issue 37 finding 1).

The bridge stamps windows with the trainer's clock; Prometheus stamps its samples with its own. Nodes drift (VMs,
containers, a failed NTP), and a trainer on one node with Prometheus on another is the normal layout. The trainer runs
here in a subprocess under libfaketime (Debian's ``faketime``), its clock moved against a real Prometheus (2.42 and
3.16) scraping both replicas every second: Prometheus 20 s ahead of the trainer, or 5 s behind.

The truth: a background thread of this process sets a replica's ``vllm:num_requests_waiting`` to the real time (in
tenths of a second since the test started) every 20 ms, so a step's ``last`` value says when Prometheus took the
sample that stood for the window's end, and completes a request of one prompt token each time (logging when). A
record is right when that sample lies within one scrape interval (plus slack) before the window's end on Prometheus'
clock, and its ``vllm:prompt_tokens_total`` delta is the requests completed in the window on the real clock, within
what completed near its boundaries (``boundary_lag_s`` plus a band, as in tests/integration/test_boundary_truth.py);
it must also say the offset the bridge measured (``otel_bridge/clock_offset_s``). Before the fix, the bridge asked at
the trainer's times and every step read samples as old (or as new) as the offset, or none, with nothing said.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import Replica
from tests.helpers import faketime
from tests.helpers.prometheus_server import PrometheusServer

# Run under libfaketime (tests/helpers/faketime.py: time.sleep made to work there).
TRAINER = textwrap.dedent(
    """
    import json, sys, time
    from otel_bridge import Bridge

    class Lines:
        name = "lines"
        def write(self, record):
            print(json.dumps({"step": record.step, "time": record.time, "values": dict(record.values)}), flush=True)
        def flush(self): pass
        def close(self): pass

    config = json.loads(sys.argv[1])
    with Bridge.from_config(config, backends=[Lines()]) as bridge:
        bridge.log({}, step=0)
        for step in range(1, 7):
            time.sleep(1.5)
            bridge.log({}, step=step)
    """
)

WAITING = "rollout/vllm/num_requests_waiting/last"
PROMPT_TOKENS = "rollout/vllm/prompt_tokens_total/delta"
OFFSET = "otel_bridge/clock_offset_s"
LAG = "otel_bridge/boundary_lag_s"
BAND_S = 0.3
SLACK_S = 0.6  # a scrape's timestamp lies before the server renders the value; the gauge is set every 20 ms


@dataclass
class Truth:
    """The real time the gauge counts from, and when each request (one prompt token) completed."""

    origin: float
    completed: list[float] = field(default_factory=list)

    def between(self, start: float, end: float) -> int:
        return sum(1 for t in self.completed if start < t <= end)


@pytest.fixture
def truth(replicas: list[Replica]) -> Iterator[Truth]:
    """Every 20 ms: the first replica's ``vllm:num_requests_waiting`` set to the tenths of a second since the origin
    (the other's to 0), and a request of one prompt token completed on the first replica (its time logged)."""
    truth = Truth(time.time())
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            replicas[0].sim.set_waiting(int((time.time() - truth.origin) * 10))
            replicas[1].sim.set_waiting(0)  # the records sum both replicas' gauges (same labels)
            replicas[0].sim.complete_request(1, 1, 0.01, 0.01, 0.0, 0.0)
            truth.completed.append(time.time())
            stop.wait(0.02)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield truth
    finally:
        stop.set()
        thread.join()


def _faketime() -> Path:
    library = faketime.libfaketime()
    if library is None:
        pytest.skip(faketime.missing_reason())
    return library


@pytest.mark.parametrize(("offset_s", "boundary"), [(20.0, "samples"), (-5.0, "samples"), (20.0, "auto")])
def test_records_are_read_on_prometheus_clock(
    tmp_path: Path,
    prometheus: PrometheusServer,
    truth: Truth,
    offset_s: float,
    boundary: str,
) -> None:
    library = _faketime()
    config = {
        "prometheus": {"url": prometheus.url, "boundary": boundary, "recording_rules": "off"},
        "metrics": [
            {"name": "vllm:num_requests_waiting", "type": "gauge", "stats": ["last"]},
            {"name": "vllm:prompt_tokens_total", "type": "counter", "stats": ["delta"]},
        ],
        "run": {"dir": str(tmp_path / "runs")},
    }
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    done = subprocess.run(
        [sys.executable, str(script), json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env=faketime.environment(library, offset_s, Path.cwd()),  # Prometheus offset_s ahead of the trainer
    )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["step"] for r in records] == list(range(7)), done.stderr
    # How far from each window's end (on Prometheus' clock) the sample read for it lies; None: no value.
    read: list[float | None] = []
    for record in records[1:]:
        end_on_prometheus = record["time"] + offset_s  # the trainer's boundary on the real (Prometheus') clock
        value = record["values"].get(WAITING)
        read.append(None if value is None else round(truth.origin + value / 10 - end_on_prometheus, 2))
    # Each step has a counter delta; their sum is the requests completed between the outer boundaries on the real
    # clock, within what completed near those two (the samples standing for a boundary lie up to boundary_lag_s before
    # it; BAND_S for rendering): the interior boundaries cancel.
    deltas = [record["values"].get(PROMPT_TOKENS) for record in records[1:]]
    first, last = records[0]["time"] + offset_s, records[-1]["time"] + offset_s
    lag = max(record["values"].get(LAG, 0.0) for record in records)
    slack = truth.between(first - lag - BAND_S, first + BAND_S) + truth.between(last - lag - BAND_S, last + BAND_S)
    run = (sum(d or 0.0 for d in deltas), truth.between(first, last), slack)
    offsets = [record["values"].get(OFFSET) for record in records]
    # Every step's gauge stands for its window's end: the sample within one scrape interval before it.
    assert all(age is not None and -1.0 - SLACK_S <= age <= SLACK_S for age in read), (read, offsets, done.stderr)
    assert None not in deltas, (deltas, done.stderr)
    assert abs(run[0] - run[1]) <= run[2], (deltas, run, done.stderr)
    assert offsets == [pytest.approx(offset_s, abs=0.1)] * len(records), (offsets, done.stderr)
    # Beyond prometheus.max_clock_offset_s (default 1 s): one WARNING naming the key.
    assert done.stderr.count("beyond prometheus.max_clock_offset_s") == 1, done.stderr


BACK_TO_BACK = textwrap.dedent(
    """
    from otel_bridge.pipeline.infra_deadline import InfraDeadline
    deadline = InfraDeadline(30.0)
    print(sum(1 for i in range(500) if deadline.run(lambda: i) != i))
    """
)


def test_a_finished_production_is_not_taken_for_a_busy_one(tmp_path: Path) -> None:
    """Found by the soak's clock-offset part (soak/clock_offset.py): under libfaketime a thread takes long to exit
    after its work is done, and a step whose production had finished (its readings in its record) made the next step
    go out with the infrastructure missing, "still busy with an earlier step". A production is over when its work is,
    whatever its thread still does: 500 back-to-back productions each return their result."""
    library = _faketime()
    done = subprocess.run(
        [sys.executable, "-c", BACK_TO_BACK],
        capture_output=True,
        text=True,
        timeout=120,
        env=faketime.environment(library, 20.0, Path.cwd()),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0"], (done.stdout, done.stderr)  # how many came back None
