"""The scrape path in a child process (``scrape.isolation: process``, the default; issue 18 point 3).

The child does the HTTP reads, the parsing and the window statistics, off the trainer's interpreter lock; the
trainer's process only sends boundary times and receives each window's statistics. These tests check behaviour only:
the same records as the in-process sampler, a child that dies is reported while the trainer's values keep arriving,
and the child neither dies of the terminal's Ctrl-C nor outlives its parent.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from otel_bridge import Bridge
from tests.conftest import Replica
from tests.faults.support import base_config, count_logs, rollout_keys
from tests.helpers.backends import BackendDouble
from tests.helpers.processes import SCRAPE_CHILD, children

pytestmark = pytest.mark.integration

STEPS = 6


def scrape_children(parent: int) -> list[int]:
    """The running children of ``parent`` that are scrape processes (read from ``/proc``)."""
    return children(SCRAPE_CHILD, parent)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie not yet reaped counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def traffic(replicas: list[Replica], step: int) -> None:
    """Deterministic requests and gauges, different per step and per replica."""
    for index, replica in enumerate(replicas):
        for request in range(step % 3 + 1 + index):
            replica.sim.complete_request(
                prompt_tokens=10 + request,
                generation_tokens=20 + 7 * step + index,
                ttft_s=0.05 * (request + 1),
                e2e_s=0.4 + 0.1 * step,
                queue_s=0.01 * index,
                itl_s=0.02,
            )
        replica.sim.set_running(step + index)
        replica.sim.set_kv_cache_usage(0.1 * ((step + index) % 10))


def scrape_config(tmp_path: Path, name: str, replicas: list[Replica], isolation: str) -> dict[str, Any]:
    scrape = {"targets": [r.url for r in replicas], "sample_interval_s": 0, "isolation": isolation}
    return base_config(tmp_path, name, scrape=scrape, metrics=[{"preset": "vllm"}])


def test_the_scrape_child_delivers_the_records_the_in_process_sampler_does(
    tmp_path: Path, replicas: list[Replica]
) -> None:
    threaded, isolated = BackendDouble(), BackendDouble()
    with (
        Bridge.from_config(scrape_config(tmp_path, "thread", replicas, "thread"), backends=[threaded]) as a,
        Bridge.from_config(scrape_config(tmp_path, "process", replicas, "process"), backends=[isolated]) as b,
    ):
        assert len(scrape_children(os.getpid())) == 1  # b's; a scrapes in this process
        for step in range(STEPS):
            traffic(replicas, step)  # between the boundaries only: both bridges read the same pages
            for bridge in (a, b):
                bridge.log({"actor/loss": float(step)}, step=step)
                bridge.collect(step)
    assert scrape_children(os.getpid()) == []
    by_thread, by_process = threaded.by_step(), isolated.by_step()
    assert sorted(by_process) == list(range(STEPS))
    for step in range(1, STEPS):
        expected, got = (
            {k: v for k, v in record[step].items() if k.startswith("rollout/")} for record in (by_thread, by_process)
        )
        assert len(expected) > 20
        assert got.keys() == expected.keys()
        # a rate divides by its bridge's own window, idle seconds are a share of it
        timeless = [k for k in expected if not k.endswith(("/rate", "/idle_seconds"))]
        assert {k: got[k] for k in timeless} == {k: expected[k] for k in timeless}
        idle = "rollout/vllm/num_requests_running/servers/idle_seconds"
        seconds = [backend.window_seconds(step) for backend in (threaded, isolated)]
        assert got[idle] / seconds[1] == pytest.approx(expected[idle] / seconds[0], abs=1e-9)
        assert by_process[step]["actor/loss"] == float(step)
    tokens = sum(by_process[s]["rollout/vllm/generation_tokens_total/delta"] for s in range(1, STEPS))
    assert tokens == sum(
        (20 + 7 * s + i) * (s % 3 + 1 + i) for s in range(1, STEPS) for i in range(len(replicas))
    )  # fmt: skip


def test_a_killed_scrape_child_is_reported_and_the_trainer_values_still_arrive(
    tmp_path: Path, replicas: list[Replica], caplog: pytest.LogCaptureFixture
) -> None:
    collecting = BackendDouble()
    config = scrape_config(tmp_path, "killed", replicas, "process")
    started = time.monotonic()
    with caplog.at_level(logging.WARNING), Bridge.from_config(config, backends=[collecting]) as bridge:
        (child,) = scrape_children(os.getpid())
        for step in range(STEPS):
            if step == 3:
                os.kill(child, signal.SIGKILL)
            traffic(replicas, step)
            bridge.log({"actor/loss": float(step)}, step=step)
            bridge.collect(step)
    assert time.monotonic() - started < 30  # no step waited out delivery.produce_timeout_s (30 s)
    by_step = collecting.by_step()
    assert [by_step[s]["actor/loss"] for s in range(STEPS)] == [float(s) for s in range(STEPS)]
    assert rollout_keys(by_step[2])
    assert not any(rollout_keys(by_step[s]) for s in range(3, STEPS))
    assert count_logs(caplog, f"the scrape process (pid {child}) exited", logging.ERROR) == 1


TRAINER = textwrap.dedent(
    """
    import os, sys
    from otel_bridge import Bridge
    from tests.faults.test_scrape_process import scrape_children
    config = {{"run": {{"name": "ctrl-c", "dir": {run_dir!r}}}, "metrics": [{{"preset": "vllm"}}],
              "scrape": {{"targets": [{url!r}], "sample_interval_s": 0}}}}
    bridge = Bridge.from_config(config)
    print(scrape_children(os.getpid())[0], flush=True)
    for step in range(2):
        sys.stdin.readline()
        bridge.log({{"actor/loss": 1.0}}, step=step)
        print(sum(k.startswith("rollout/") for k in bridge.collect(step)), flush=True)
    sys.stdin.readline()
    """
)


def test_the_scrape_child_ignores_ctrl_c_and_ends_with_its_parent(tmp_path: Path, replicas: list[Replica]) -> None:
    script = TRAINER.format(run_dir=str(tmp_path), url=replicas[0].url)
    repo = Path(__file__).resolve().parents[2]
    trainer = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=repo
    )
    assert trainer.stdin is not None
    assert trainer.stdout is not None
    try:
        child = int(trainer.stdout.readline())
        trainer.stdin.write("\n")
        trainer.stdin.flush()
        first = int(trainer.stdout.readline())  # no baseline yet: the gauges only
        os.kill(child, signal.SIGINT)  # what Ctrl-C in a terminal sends the whole foreground group
        traffic(replicas[:1], 1)
        trainer.stdin.write("\n")
        trainer.stdin.flush()
        assert int(trainer.stdout.readline()) > max(first, 10)  # the child still serves the next step
        assert alive(child)
        trainer.kill()  # the trainer dies without closing anything
        trainer.wait(10)
        deadline = time.monotonic() + 20
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child)
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait(10)


def test_boundaries_never_wait_for_a_stopped_child_and_its_backlog_is_read(replicas: list[Replica]) -> None:
    from otel_bridge.config import MetricConfig
    from otel_bridge.producers.base import metrics_of
    from otel_bridge.producers.metric_set import resolve_metrics
    from otel_bridge.producers.scrape.process import ScrapeProcess
    from otel_bridge.window import StepWindow

    queries = resolve_metrics([MetricConfig(name="vllm:generation_tokens_total", type="counter", stats=["delta"])])
    producer = ScrapeProcess([replicas[0].url], queries, sample_interval_s=0, produce_timeout_s=20)
    try:
        producer.start()
        first = time.time()
        producer.on_boundary(first)
        os.kill(producer.pid, signal.SIGSTOP)  # its pipe fills after ~1,500 boundaries: the rest must queue
        try:
            boundaries: list[float] = []

            def post() -> None:
                for _ in range(5000):
                    boundaries.append(time.time())
                    producer.on_boundary(boundaries[-1])

            sender = threading.Thread(target=post)
            sender.start()
            sender.join(30)
            assert not sender.is_alive()  # every call returned while the child could read nothing
        finally:
            os.kill(producer.pid, signal.SIGCONT)
        # once the child has read the backlog
        (backlog,) = metrics_of(producer.produce(window=StepWindow(0, first, boundaries[-1])))
        assert [p.value for p in backlog.data.data_points] == [0.0]
        traffic(replicas[:1], 2)
        last = time.time()
        producer.on_boundary(last)
        (metric,) = metrics_of(producer.produce(window=StepWindow(1, boundaries[-1], last)))
        # The queued boundaries were all delivered (the window above found its end), and the next window holds
        # exactly this step's tokens.
        assert [p.value for p in metric.data.data_points] == [float((20 + 7 * 2) * (2 % 3 + 1))]
    finally:
        producer.close()
