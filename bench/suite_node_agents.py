"""Node agents at scale (issue 38, point 6): the per-node readings against today's single-process scrape and today's
PromQL ``samples`` plan, in one run, at 64, 256 and 1,024 simulated replicas over 8, 16 and 32 simulated nodes.

Replicas: :mod:`bench.replica_server` (one process, one event loop): N ports of 127.0.0.1 serving the real vLLM
capture (49.5 kB, 415 samples) whose request and token counters move at a known rate per replica, so the truth of
every window is exact. The ``vllm`` preset is configured (15 metrics, histograms included). Each arm reads the same
replicas over the same kind of contiguous steps (``--steps`` measured steps of ``--step-s`` seconds on a fixed grid,
after one opening boundary); boundaries are taken by the main thread on time, and the windows are produced one after
the other on a worker thread, as the bridge's delivery worker does. Only boundary readings are taken
(``scrape.sample_interval_s: 0``), so one boundary is one reading of every replica.

Arms (the producers themselves, built as the pipeline builds them; ``on_boundary`` and ``produce`` called as the
bridge calls them):

* **scrape** (baseline): today's single-process scrape path, ``scrape.readers: trainer`` with its default
  ``scrape.isolation: process``: one child process of the trainer reads every replica.
* **node agents**: one simulated node per ``replicas / nodes`` replicas (:mod:`bench.simulated_node`): the node
  agent's own code (:class:`~otel_bridge.producers.scrape.agent.NodeAgent`) in its own process, told of boundaries
  and asked for partials over a pipe; this process merges the partials with
  :func:`~otel_bridge.producers.partials.merge_window`.
* **promql samples** (baseline): today's PromQL path with ``prometheus.boundary: samples`` (its default
  ``isolation: process``) on a real Prometheus (3.16 if built, else Debian's 2.42) scraping every replica every
  ``--scrape-interval-s``.
* **ray** (``--ray``, a cross-check, smallest configuration only): the real ``scrape.readers: node_agents`` on a
  3-node ``ray.cluster_utils.Cluster`` on this machine.

Measured per arm, per step (over the measured steps, after a warm-up window): bytes that come to the trainer's side
(scrape: the pages the replicas served, counted by the replica server; node agents and Ray: the pickled partials,
protocol 5, without Ray's framing; PromQL: the answers on the wire, gzip included, counted by
:class:`bench.suite_promql_scale.CountingProxy` in another process), the trainer process' CPU and that of its child
(scrape or PromQL child: the same node), the training thread's ``on_boundary`` (p50/p99/max), each reader node's CPU
per boundary (the largest reported; for the single-process arms the trainer's node: trainer plus child), Prometheus'
own CPU beside it, and exactness: requests counted in the wrong step, the sum over steps of |value - truth| of
``vllm:request_success_total``'s delta (each misplaced request counts twice: out of one step, into another), and the
run's sum against the truth.

``python -m bench.suite_node_agents [--quick] [--sizes 64:8 256:16 1024:32] [--arms scrape node-agents promql]
[--ray]``; ``--table`` prints the Markdown table of the last results.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import RESULTS, stdin_bound_child, summary, write_result
from bench.replica_server import window_truth
from bench.suite_promql_scale import CountingProxy, process_cpu_s, source_state

NAME = "node-agents"
SIZES = ((64, 8), (256, 16), (1024, 32))
QUICK_SIZES = ((64, 8),)
ARMS = ("scrape", "node-agents", "promql")
STEPS = 4
STEP_S = 10.0
SCRAPE_INTERVAL_S = 5.0
METRIC = "vllm:request_success_total"
RAY_NODES = 3  # the cross-check's real Ray nodes (``--ray``), and the simulated split measured beside it
_log = logging.getLogger("bench.node_agents")


# ---------------------------------------------------------------------------------------------------------- processes
def descendants(pid: int) -> list[int]:
    """Every running descendant of ``pid``."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        for listing in Path(f"/proc/{parent}/task").glob("*/children"):
            try:
                kids = [int(p) for p in listing.read_text().split()]
            except OSError:
                continue
            found.extend(kids)
            todo.extend(kids)
    return found


def command_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@dataclass
class Replicas:
    """The replica server's process, its ports, the counting port and the time its counters start from."""

    process: subprocess.Popen[bytes]
    ports: list[int]
    counting_port: int
    t0: float

    @property
    def targets(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.ports]

    def served(self) -> dict[str, int]:
        """Pages and bytes the replicas have served so far."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.counting_port}/", timeout=10) as answer:
            return dict(json.loads(answer.read()))


@contextmanager
def replica_server(count: int) -> Iterator[Replicas]:
    """Start :mod:`bench.replica_server` with ``count`` replicas; stop it (by PID) on exit, even on errors."""
    t0 = time.time()
    with stdin_bound_child("bench.replica_server", "--ports", str(count), "--t0", repr(t0)) as (process, info):
        yield Replicas(process, info["ports"], info["counting_port"], t0)


# --------------------------------------------------------------------------------------------------------------- arms
@dataclass
class Arm:
    """A producer under measurement and where its work happens: ``trainer_children`` (the trainer's node besides this
    process), ``nodes`` (node name -> pid: the other nodes' readers), ``store`` (Prometheus' pid) and how to count
    the bytes that came to the trainer's side since the start (``bytes_in``)."""

    name: str
    producer: Any
    bytes_in: Callable[[], int]
    trainer_children: Callable[[], list[int]] = list
    nodes: Callable[[], dict[str, int]] = dict
    store: int | None = None
    close: Callable[[], None] = lambda: None
    after_start: Callable[[], None] = lambda: None
    extra: dict[str, Any] = field(default_factory=dict)


def _config(targets: list[str], **sections: Any) -> Any:
    from otel_bridge.config import BridgeConfig

    base: dict[str, Any] = {"metrics": [{"preset": "vllm"}], "trackers": [{"type": "console"}]}
    return BridgeConfig.model_validate({**base, **sections})


def _built(config: Any) -> Any:
    from otel_bridge.health import Health
    from otel_bridge.pipeline import build_producers

    (producer,) = build_producers(config, Health())
    return producer


def scrape_arm(replicas: Replicas) -> Arm:
    config = _config(
        replicas.targets, scrape={"targets": replicas.targets, "sample_interval_s": 0, "readers": "trainer"}
    )
    producer = _built(config)
    return Arm(
        "scrape",
        producer,
        bytes_in=lambda: replicas.served()["bytes"],
        trainer_children=lambda: [p for p in descendants(os.getpid()) if "scrape.child" in command_of(p)],
        close=producer.close,
    )


def node_agents_arm(replicas: Replicas, nodes: int) -> Arm:
    from bench.simulated_node import SimulatedNodes
    from otel_bridge.producers import resolve_metrics
    from otel_bridge.producers.scrape import ENDPOINT_DEFAULTS

    config = _config(replicas.targets, scrape={"targets": replicas.targets, "sample_interval_s": 0})
    queries = resolve_metrics(config.metrics, config.roles, config.max_groups)
    urls = [f"http://{t}/metrics" for t in replicas.targets]
    per = -(-len(urls) // nodes)
    assignment = {f"node-{k:02d}": urls[k * per : (k + 1) * per] for k in range(nodes) if urls[k * per : (k + 1) * per]}
    options = {  # the scrape producer's options as the pipeline gives them for this config (no TLS, no credentials)
        "transport": ENDPOINT_DEFAULTS,
        "sample_interval_s": config.scrape.sample_interval_s,
        "max_series": config.scrape.max_series,
        "produce_timeout_s": config.delivery.produce_timeout_s,
        "warn_interval_s": config.delivery.warn_interval_s,
    }
    simulated = SimulatedNodes(assignment, queries, options, since=time.time())
    received = {"bytes": 0}
    produce = simulated.produce

    def counted(timeout_millis: float = 10_000, *, window: Any) -> Any:
        metrics = produce(timeout_millis, window=window)
        received["bytes"] += sum(simulated.received_bytes)
        arm.extra.setdefault("partial_bytes_per_node", []).append(list(simulated.received_bytes))
        return metrics

    simulated.produce = counted  # type: ignore[method-assign]
    arm = Arm(
        "node-agents",
        simulated,
        bytes_in=lambda: received["bytes"],
        nodes=lambda: dict(zip([n.name for n in simulated.nodes], simulated.pids, strict=True)),
        close=simulated.close,
        extra={"nodes": len(assignment), "replicas_per_node": per},
    )
    return arm


def promql_arm(prometheus_url: str, prometheus_pid: int, interval_s: float) -> Arm:
    proxy = CountingProxy(prometheus_url)  # counts the answers' bytes on the wire (gzip as requests asks for it)
    config = _config([], prometheus={"url": proxy.url, "boundary": "samples", "scrape_interval_s": interval_s})
    producer = _built(config)
    received = {"bytes": 0}

    def bytes_in() -> int:
        received["bytes"] += sum(r["wire_bytes"] for r in proxy.take())
        return received["bytes"]

    def close() -> None:
        producer.close()
        proxy.close()

    return Arm(
        "promql",
        producer,
        bytes_in=bytes_in,
        trainer_children=lambda: [p for p in descendants(os.getpid()) if "promql.child" in command_of(p)],
        store=prometheus_pid,
        close=close,
    )


def ray_arm(replicas: Replicas) -> Arm:
    """The real node agents (Ray actors) of a 3-node cluster on this machine; Ray must be initialised here."""
    import ray

    config = _config(
        replicas.targets,
        scrape={"targets": replicas.targets, "sample_interval_s": 0, "readers": "node_agents"},
    )
    producer = _built(config)
    counting = _CountingRay(ray)

    def agents() -> dict[str, int]:  # benchmark instrumentation: the actors' process ids
        return {
            node_id[:8]: int(ray.get(agent.handle.__ray_call__.remote(lambda _self: os.getpid())))
            for node_id, agent in producer._agents.items()
        }

    def after_start() -> None:
        producer._ray = counting  # benchmark instrumentation: the partials' pickled size as they arrive

    return Arm(
        "ray",
        producer,
        bytes_in=lambda: counting.received,
        nodes=agents,
        close=producer.close,
        after_start=after_start,
    )


class _CountingRay:
    """``ray`` with ``get`` counting the pickled size (protocol 5) of every :class:`WindowPartial` it returns."""

    def __init__(self, ray: Any) -> None:
        self._ray = ray
        self.received = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ray, name)

    def get(self, ref: Any, *args: Any, **kwargs: Any) -> Any:
        import pickle

        from otel_bridge.producers import WindowPartial

        value = self._ray.get(ref, *args, **kwargs)
        if isinstance(value, WindowPartial):
            self.received += len(pickle.dumps(value, protocol=5))
        return value


# ------------------------------------------------------------------------------------------------------- measurement
def _request_deltas(produced: Any) -> float | None:
    """``vllm:request_success_total``'s delta (summed over its groups) in one window's metrics, else ``None``."""
    from otel_bridge.schema import STAT_ATTRIBUTE

    metrics = [m for item in produced for m in getattr(item, "metrics", [item])]
    values = [
        p.value
        for m in metrics
        if m.name == METRIC
        for p in m.data.data_points
        if dict(p.attributes or {}).get(STAT_ATTRIBUTE) == "delta"
    ]
    return sum(values) if values else None


def _snapshot(arm: Arm, nodes: dict[str, int], children: list[int]) -> dict[str, Any]:
    """The counters ``measure`` takes the difference of: CPU seconds of this process, its child, each reader node
    and the store, bytes come in, and the wall clock."""
    return {
        "trainer": time.process_time(),
        "children": sum(process_cpu_s(p) for p in children),
        "nodes": {n: process_cpu_s(p) for n, p in nodes.items()},
        "store": process_cpu_s(arm.store) if arm.store else 0.0,
        "bytes": arm.bytes_in(),
        "wall": time.perf_counter(),
    }


def measure(arm: Arm, replicas: Replicas, steps: int, step_s: float) -> dict[str, Any]:
    """Start ``arm``'s producer, take one opening boundary and ``steps`` measured boundaries on a grid of ``step_s``,
    produce each window on a worker thread; what each cost and counted."""
    from otel_bridge.window import StepWindow

    started = time.perf_counter()
    arm.producer.start()
    startup_s = time.perf_counter() - started
    arm.after_start()
    windows: list[tuple[int, float, float]] = []
    produced: dict[int, tuple[float | None, float, float]] = {}  # step -> (value, wall, trainer cpu at its end)
    queue_lock = threading.Condition()

    def worker() -> None:
        done = 0
        while done < steps:
            with queue_lock:
                queue_lock.wait_for(lambda done=done: len(windows) > done)
                step, start, end = windows[done]
            t0 = time.perf_counter()
            try:
                value = _request_deltas(arm.producer.produce(60_000, window=StepWindow(step, start, end)))
            except Exception as exc:  # noqa: BLE001 - recorded: a window the arm could not produce
                _log.error("%s: step %d failed: %s", arm.name, step, exc)
                value = None
            produced[step] = (value, time.perf_counter() - t0, time.process_time())
            done += 1

    thread = threading.Thread(target=worker, name="bench-delivery", daemon=True)
    opening = time.time()  # a warm-up window, produced before measuring: its end's readings are in when it returns
    arm.producer.on_boundary(opening)
    time.sleep(1.0)
    previous = time.time()
    arm.producer.on_boundary(previous)
    arm.producer.produce(120_000, window=StepWindow(0, opening, previous))
    grid = time.time()
    nodes = arm.nodes()
    children = arm.trainer_children()
    before = _snapshot(arm, nodes, children)
    thread.start()
    boundary_s: list[float] = []
    for step in range(1, steps + 1):
        time.sleep(max(0.0, grid + step * step_s - time.time()))
        t = time.time()
        t0 = time.perf_counter()
        arm.producer.on_boundary(t)
        boundary_s.append(time.perf_counter() - t0)
        with queue_lock:
            windows.append((step, previous, t))
            queue_lock.notify()
        previous = t
    thread.join(timeout=300)
    after = _snapshot(arm, nodes, children)
    node_cpu = {n: (after["nodes"][n] - before["nodes"][n]) / steps for n in nodes}
    truths = [window_truth(len(replicas.ports), start, end, replicas.t0) for _, start, end in windows]
    values = [produced.get(step, (None, 0.0, 0.0))[0] for step, _, _ in windows]
    wrong = sum(abs((v or 0.0) - t) for v, t in zip(values, truths, strict=True))
    trainer_cpu = (after["trainer"] - before["trainer"]) / steps
    children_cpu = (after["children"] - before["children"]) / steps
    store_cpu = (after["store"] - before["store"]) / steps
    trainer_node = trainer_cpu + children_cpu
    return {
        "arm": arm.name,
        "startup_s": startup_s,
        "steps": steps,
        "step_s": step_s,
        "windows": [[s, a, b] for s, a, b in windows],
        "values": values,
        "truths": truths,
        "produce_wall_s": [produced.get(step, (None, float("nan"), 0.0))[1] for step, _, _ in windows],
        "bytes_per_step": (after["bytes"] - before["bytes"]) / steps,
        "trainer_cpu_per_step_s": trainer_cpu,
        "trainer_child_cpu_per_step_s": children_cpu,
        "node_cpu_per_boundary_s": node_cpu,
        "worst_node_cpu_per_boundary_s": max([trainer_node, *node_cpu.values()]),
        "worst_reader_node": max(node_cpu, key=lambda n: node_cpu[n]) if node_cpu else "trainer",
        "store_cpu_per_step_s": store_cpu,
        "boundary_s": summary(boundary_s),
        "wrong_step_requests": wrong,
        "requests_truth": sum(truths),
        "run_sum": sum(v or 0.0 for v in values),
        "missing_windows": sum(v is None for v in values),
        "late_s": max(0.0, after["wall"] - before["wall"] - steps * step_s),
        **arm.extra,
    }


# ---------------------------------------------------------------------------------------------------------------- run
def _prometheus_version() -> str:
    from tests.helpers.prometheus_server import prometheus_binary

    try:
        prometheus_binary("3.16")
    except Exception:  # noqa: BLE001 - the peer is not built here: Debian's 2.42
        return "2.42"
    return "3.16"


def run(
    quick: bool,
    workdir: Path,
    sizes: tuple[tuple[int, int], ...] | None = None,
    arms: tuple[str, ...] = ARMS,
    steps: int | None = None,
    step_s: float = STEP_S,
    with_ray: bool = False,
) -> dict[str, Any]:
    """Run the suite; write ``results/node-agents.json``; return the rows of the README table."""
    from tests.helpers.prometheus_server import PrometheusServer

    sizes = sizes or (QUICK_SIZES if quick else SIZES)
    steps = steps or (2 if quick else STEPS)
    version = _prometheus_version()
    results: list[dict[str, Any]] = []
    loads: list[list[float]] = []
    for replicas_n, nodes_n in sizes:
        with replica_server(replicas_n) as replicas:
            for name in arms:
                loads.append(list(os.getloadavg()))
                _log.info("node-agents: %d replicas, %d nodes: %s", replicas_n, nodes_n, name)
                if name == "promql":
                    server = PrometheusServer(
                        workdir / f"prometheus-{replicas_n}",
                        replicas.targets,
                        scrape_interval_s=SCRAPE_INTERVAL_S,
                        version=version,
                    )
                    server.start(timeout_s=120)
                    try:
                        server.wait_for_samples(METRIC, count=2, timeout_s=120)
                        assert server.process is not None
                        arm = promql_arm(server.url, server.process.pid, SCRAPE_INTERVAL_S)
                        try:
                            row = measure(arm, replicas, steps, step_s)
                        finally:
                            arm.close()
                        row["prometheus"] = version
                    finally:
                        server.stop()
                else:
                    arm = scrape_arm(replicas) if name == "scrape" else node_agents_arm(replicas, nodes_n)
                    try:
                        row = measure(arm, replicas, steps, step_s)
                    finally:
                        arm.close()
                results.append({"replicas": replicas_n, "nodes": nodes_n if name == "node-agents" else 1, **row})
                _log.info("node-agents: %s", json.dumps(_row(results[-1])))
            if with_ray and (replicas_n, nodes_n) == sizes[0]:  # the same split both ways: 3 nodes
                arm = node_agents_arm(replicas, RAY_NODES)
                try:
                    results.append(
                        {"replicas": replicas_n, "nodes": RAY_NODES, **measure(arm, replicas, steps, step_s)}
                    )
                finally:
                    arm.close()
                results.append(_ray_cross_check(replicas, steps, step_s))
                _log.info("node-agents: %s", json.dumps(_row(results[-1])))
            loads.append(list(os.getloadavg()))
    configuration = {
        "sizes": [list(s) for s in sizes],
        "arms": list(arms),
        "steps": steps,
        "step_s": step_s,
        "scrape_interval_s": SCRAPE_INTERVAL_S,
        "prometheus": version,
        "preset": "vllm",
        "sample_interval_s": 0,
        "loadavg_during": loads,
        "otel_bridge_source": source_state(),
    }
    write_result(NAME, {"configuration": configuration, "results": results})
    return {"rows": [_row(r) for r in results], "loadavg_during": loads}


def _ray_cross_check(replicas: Replicas, steps: int, step_s: float) -> dict[str, Any]:
    """The real node agents on a 3-node Ray cluster (``tests/ray_fixtures.multi_node_cluster``) over the same
    replicas; Ray is started here and shut down after."""
    import tempfile

    from tests.ray_fixtures import multi_node_cluster

    temp = Path(tempfile.mkdtemp(prefix="otbb-", dir="/tmp"))  # short: Ray's Unix sockets live under it
    with multi_node_cluster(RAY_NODES, temp):
        arm = ray_arm(replicas)
        try:
            row = measure(arm, replicas, steps, step_s)
        finally:
            arm.close()
    shutil.rmtree(temp, ignore_errors=True)
    return {"replicas": len(replicas.ports), "nodes": RAY_NODES, **row}


def _row(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "replicas": r["replicas"],
        "nodes": r["nodes"],
        "arm": r["arm"],
        "bytes_per_step": round(r["bytes_per_step"]),
        "trainer_cpu_ms": round(1000 * r["trainer_cpu_per_step_s"], 1),
        "trainer_child_cpu_ms": round(1000 * r["trainer_child_cpu_per_step_s"], 1),
        "boundary_p50_us": round(1e6 * r["boundary_s"]["p50"], 1),
        "boundary_max_us": round(1e6 * r["boundary_s"]["max"], 1),
        "worst_node_cpu_ms": round(1000 * r["worst_node_cpu_per_boundary_s"], 1),
        "store_cpu_ms": round(1000 * r["store_cpu_per_step_s"], 1),
        "wrong_step_requests": r["wrong_step_requests"],
        "requests_truth": r["requests_truth"],
        "run_sum": r["run_sum"],
        "missing_windows": r["missing_windows"],
        "produce_wall_max_s": round(max(r["produce_wall_s"]), 2),
    }


def table(path: Path = RESULTS / f"{NAME}.json") -> str:
    """The Markdown table of the last results (ratios against the single-process scrape of the same size)."""
    results = json.loads(path.read_text())["results"]
    lines = [
        "| replicas | nodes | reader | bytes to the trainer / step | trainer process CPU / step (ms) | its child "
        "(ms) | `on_boundary` p50 / max (µs) | worst node CPU / boundary (ms) | Prometheus CPU / step (ms) | "
        "requests in the wrong step / truth | run sum - truth |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = {r["replicas"]: r for r in results if r["arm"] == "scrape"}
    for r in results:
        b = base.get(r["replicas"])

        def ratio(key: str, r: dict[str, Any] = r, b: dict[str, Any] | None = b) -> str:
            if b is None or r is b or not b[key]:
                return ""
            return f" (x{r[key] / b[key]:.2g})"

        lines.append(
            f"| {r['replicas']:,} | {r['nodes']} | {r['arm']} | {r['bytes_per_step']:,.0f}{ratio('bytes_per_step')} | "
            f"{1000 * r['trainer_cpu_per_step_s']:.1f}{ratio('trainer_cpu_per_step_s')} | "
            f"{1000 * r['trainer_child_cpu_per_step_s']:.0f} | "
            f"{1e6 * r['boundary_s']['p50']:.0f} / {1e6 * r['boundary_s']['max']:.0f} | "
            f"{1000 * r['worst_node_cpu_per_boundary_s']:.0f}{ratio('worst_node_cpu_per_boundary_s')} | "
            f"{1000 * r['store_cpu_per_step_s']:.0f} | "
            f"{r['wrong_step_requests']:,.0f} / {r['requests_truth']:,} | {r['run_sum'] - r['requests_truth']:+,.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m bench.suite_node_agents", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sizes", nargs="+", help="replicas:nodes, e.g. 64:8 256:16 1024:32")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--steps", type=int)
    parser.add_argument("--step-s", type=float, default=STEP_S)
    parser.add_argument("--ray", action="store_true", help="also the real node agents on a 3-node Ray cluster")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--table", action="store_true", help="print the table of the last results and exit")
    args = parser.parse_args(argv)
    if args.table:
        sys.stdout.write(table() + "\n")
        return 0
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("bench").setLevel(logging.INFO)
    sizes = tuple((int(a), int(b)) for a, b in (s.split(":") for s in args.sizes)) if args.sizes else None
    import tempfile

    with tempfile.TemporaryDirectory(prefix="otel-bridge-bench-") as tmp:
        out = run(args.quick, args.workdir or Path(tmp), sizes, tuple(args.arms), args.steps, args.step_s, args.ray)
    sys.stdout.write(json.dumps(out, indent=1) + "\n" + table() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
