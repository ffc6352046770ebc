"""Boundary readings taken by node agents (``scrape.readers``) on a real three-node Ray cluster on this machine, on
both paths, against the simulators' truth, on a saturated machine.

Three Ray nodes (``ray.cluster_utils.Cluster``: a head with one CPU and two nodes with none; the agents take none) and
six simulated vLLM replicas on 127.0.0.1, which the placement spreads over the three nodes (they are one machine; a
replica is swapped for one on another port until every node has some: :func:`spread_over_the_nodes`), scraped by two
real Prometheus servers (Debian's 2.42 and 3.16) every second. Requests finish on every replica across the step
boundaries (:class:`tests.helpers.traffic.Traffic`); four bridges read the same replicas over the same contiguous steps:
the scrape path through the node agents (``agents``), the scrape path through the trainer (``scrape.readers: trainer``,
the reference), and the PromQL path on each Prometheus (``promql``, ``promql-3.16``) with ``prometheus.boundary: auto``
and ``boundary_max_targets`` below the six targets Prometheus lists: on Ray, node agents take its boundary readings
(owned by its child process, which joins the cluster as a driver of its own) and the limit does not apply, so its
counters are exact as well, while Prometheus still serves its gauge. The same PromQL config without Ray (before this
process connects to the cluster) bounds its windows by Prometheus' samples, as the limit says. After the third step the
scrape path's agent of one node (not the trainer's) is killed (``ray.kill``), and so is the PromQL path's agent of that
node (its process, ``SIGKILL``; each PromQL bridge's): their replicas are unread (named in every record) until the
agents that replace them read them; after the ninth that node leaves the cluster, and its replicas are unread until the
agents of the other two nodes (the same machine) read them. After the fifth step a replica of another node goes down
(its port refuses connections) for three steps and comes back as a new process counting from zero, as a real vLLM
restart does.

Every step runs on a saturated machine (:class:`tests.helpers.cpu_load.CPULoad`: a CPU-bound process on every core,
as on a trainer node), from just before the first boundary until the four bridges are closed: every boundary,
reading, merge, fault and replacement above happens with every core busy. The load starts once the servers answer
(the replicas, Prometheus' first samples, the cluster and the bridges' start), as the saturated cases of
``tests/integration/test_boundary_truth.py`` do, and the steps are the only part that runs under it. There is no calm
twin of the run: the checks below are the same, with the same tolerances, on a calm machine and on a busy one, and a
busy machine is the harder of the two for all of them (readings late after their boundary, agents and their
replacements started slowly, Ray's failure detection late), so a calm run would show nothing the busy one does not.
Two parts run calm, outside the load, because saturation changes nothing they assert and the load holds the whole
machine (no other test of the parallel suite runs meanwhile), so it is kept to the steps: the PromQL config's choice
without Ray (a function of the config and whether Ray is there), and the second trainer killed outright (Ray ends the
actors of a dead driver; how soon is not asserted, only that none remains).

Checked, per replica (the metric is grouped by ``instance``), with tolerances from the traffic log only:

- every step of every replica the agents read (either path's), and every step of the trainer's bridge: the truth of
  its window,
  give or take what completed within the reading band after each boundary (``BAND_S``, or the record's
  ``boundary_lag_s`` when larger);
- the run's sum: exact for every replica on every bridge, except the killed agents' replicas through the agents:
  what they counted between the dead agent's last reading and the new agent's first one is in no step, so their sum
  is the truth less at most what they completed from the start of the first step naming them unread to the end of
  the last one;
- the killed agent was replaced on its node as soon as Ray reported its death (the run waits for the record before
  the kill, so no window asks the agents meanwhile), and its targets were named unread while it was, the step it was
  killed in included, and the next one, begun at once while the replacement was starting: the replacement read both
  only from its first reading on; once its node left, they were read by the other nodes' agents;
- the restarted replica is named unread and its failed scrapes counted (``otel_bridge/scrape_errors``) by both
  bridges, and its run's sum is the truth less what it completed after the bridge's last reading of it before it went
  down (lost to every observer, as in ``tests/integration/test_boundary_truth.py``'s outage case);
- a second trainer on the same cluster (both paths), killed outright, leaves no agent running: neither its own nor
  its PromQL child's.

The run happens in a child process (:func:`run`), whose Ray is its own: the suite's session cluster
(``tests/ray_fixtures.py``) may be initialised in the test process already, and one process holds one Ray. The load is
the test process' (the machine's hold, ``tests/plugins/machine.py``, is that process' and its test's): the child says
over a pipe when its servers answer and when its bridges are closed, and waits for the load to run before its first
boundary. The child writes what the test checks to a JSON file; the test ends the child's process group (the Ray
processes it started) whatever happens.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from otel_bridge.producers.scrape._internal.placement import assign_targets
from tests.helpers.cpu_load import CPULoad
from tests.helpers.prometheus_server import PrometheusServer
from tests.plugins import tiers
from tests.ray_fixtures import multi_node_cluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.saturates,  # every step runs with a CPU-bound process on every core (the module docstring)
    pytest.mark.sleeps(26, reason="steps are wall-clock windows of live traffic: sixteen steps of 1.5 s"),
]

ROOT = Path(__file__).resolve().parents[2]
REPLICAS = 6
STEPS = 16  # seven steps after LEAVE_AFTER: the new agents of two bridges start on the other nodes meanwhile
STEP_S = 1.5
KILL_AFTER = 3
DOWN_AFTER, UP_AFTER = 5, 8  # a replica on another node is down (its port refuses) for three steps, then a new process
LEAVE_AFTER = 9  # the node of the agent killed after KILL_AFTER leaves the cluster (each new agent is a new worker
# process, and a node without CPUs has none started in advance: several seconds on the loaded machine)
SCRAPE_ERRORS_PREFIX = "otel_bridge/scrape_errors/instance."
BAND_S = 0.5  # readings at a boundary reach a replica within this long on the loaded 2-core machine
TOKENS = "rollout/vllm/generation_tokens_total/delta"
LAG_KEY = "otel_bridge/boundary_lag_s"
UNREAD_PREFIX = "otel_bridge/unread_s/instance."  # then host_port
METRICS = [{"name": "vllm:generation_tokens_total", "type": "counter", "stats": ["delta"], "by": ["instance"]}]
GAUGE = {"name": "vllm:num_requests_running", "type": "gauge", "stats": ["max"]}  # the PromQL path's, from Prometheus
GAUGE_KEY = "rollout/vllm/num_requests_running/max"
PROMQL = {"promql": "2.42", "promql-3.16": "3.16"}  # a PromQL bridge per Prometheus version, on the same run
BOUNDARY_MAX_TARGETS = 2  # below the replicas Prometheus lists: one process' reach
RUN_TIMEOUT_S = 300
REPLACED_WITHIN_S = 20.0  # Ray reports an actor's death to its owner within a second or two on the loaded machine
READY, LOADED, CLOSED = b"r", b"l", b"c"  # the child's and the test's messages on their pipes (see the docstring)


def worker_group(test: str) -> str:
    """Every test of this module saturates the machine: they run in the one worker of every saturating test
    (tests/plugins/tiers.py)."""
    return tiers.SATURATING


def promql_config(url: str, name: str, runs: Path) -> dict[str, Any]:
    """The PromQL path on Prometheus at ``url`` with ``boundary: auto`` and fewer ``boundary_max_targets`` than
    targets (``scrape.readers`` its default, ``auto``)."""
    return {
        "metrics": [*METRICS, GAUGE],
        "run": {"name": name, "dir": str(runs)},
        "prometheus": {"url": url, "boundary": "auto", "boundary_max_targets": BOUNDARY_MAX_TARGETS},
        "scrape": {"sample_interval_s": 0.25},
    }


def node_agents_of_others() -> list[dict[str, Any]]:
    """The alive node agents another driver than this process owns (Ray's actor table, read from the GCS: a PromQL
    child's agents, whose handles only that child holds)."""
    import ray
    from ray._private import state

    mine = ray.get_runtime_context().get_job_id()
    actors = state.actors(actor_state_name="ALIVE").values()
    return [a for a in actors if a["ActorClassName"] == "NodeAgent" and a["JobID"] != mine]


def run(out: Path, to_test: int, to_run: int) -> None:
    """The run (in a child process): cluster, replicas, traffic, four bridges, the faults; the outcome into ``out``.
    Once the bridges are started it writes :data:`READY` to the pipe ``to_test`` and waits for :data:`LOADED` on
    ``to_run`` (the machine is saturated); it writes :data:`CLOSED` once the bridges are closed."""
    import ray

    from otel_bridge import Bridge
    from tests.conftest import Replica
    from tests.helpers.traffic import Traffic

    stack = ExitStack()

    logging.basicConfig(level=logging.WARNING, format="%(created).3f %(name)s %(message)s")
    logging.getLogger("otel_bridge.producers.scrape.node_agents").setLevel(logging.DEBUG)
    temp = Path(tempfile.mkdtemp(prefix="otbn-", dir="/tmp"))  # short: Ray's Unix sockets live under it
    replicas: list[Any] = []
    bridges: list[Any] = []
    traffic: Any = None
    try:
        replicas = [Replica() for _ in range(REPLICAS)]
        cluster = stack.enter_context(multi_node_cluster(3, temp, connect=False))
        spread_over_the_nodes(cluster, replicas)
        targets = [r.url for r in replicas]
        stores = {
            name: stack.enter_context(PrometheusServer(temp / name, [r.hostport for r in replicas], version=version))
            for name, version in PROMQL.items()
        }
        without_ray = {}
        for name, store in stores.items():
            store.wait_for_samples("vllm:generation_tokens_total", count=1)
            alone = Bridge.from_config(promql_config(store.url, f"without-ray-{name}", temp / "runs"))
            without_ray[name] = alone._producers[0].boundary  # Ray not initialised here yet: the trainer reads
            alone.close()
        prometheus = stores["promql"]
        ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.WARNING)
        for name, readers in (("agents", "node_agents"), ("trainer", "trainer")):
            config = {
                "metrics": METRICS,
                "run": {"name": name, "dir": str(temp / "runs")},
                "scrape": {"targets": targets, "sample_interval_s": 0.25, "readers": readers, "isolation": "thread"},
            }
            bridges.append(Bridge.from_config(config))
        for name, store in stores.items():
            bridges.append(Bridge.from_config(promql_config(store.url, name, temp / "runs")))
        agents = bridges[0]._producers[0]
        promql_boundary = {name: b._producers[0].boundary for name, b in zip(PROMQL, bridges[2:], strict=True)}
        before = agents.assignment()
        os.write(to_test, READY)
        if os.read(to_run, 1) != LOADED:
            raise RuntimeError("the test process ended before it saturated the machine")
        traffic = Traffic([r.sim for r in replicas], seed=38, start_delay_s=0.3)
        for bridge in bridges:
            bridge.log({}, step=0)
        traffic.start()
        killed: dict[str, Any] = {}
        outage: dict[str, Any] = {}
        down = -1
        starting: Any = None  # the killed agent's replacement's start, while the step after the kill begins
        for step in range(1, STEPS + 1):
            if starting is None:
                time.sleep(STEP_S)
            else:  # this step begins at once, while the replacement is still starting (a new Ray worker: seconds)
                killed["begun_while_starting"] = not ray.wait([starting], timeout=0)[0]
            if step == STEPS:
                traffic.stop()
                time.sleep(0.3)  # the run's last boundary is quiet
            for bridge in bridges:
                bridge.log({}, step=step)
            if starting is not None:
                ray.get(starting, timeout=REPLACED_WITHIN_S)
                starting = None
            if step == KILL_AFTER:
                bridges[0].collect(step)  # the step that ended here is delivered: no window asks the agents now
                driver = ray.get_runtime_context().get_node_id()
                node_id, urls = next((n, u) for n, u in sorted(agents.assignment().items()) if n != driver)
                handle = agents._agents[node_id].handle
                ray.kill(handle)
                killed = {"node": node_id, "targets": urls, "at": time.time()}
                killed["replaced_after_s"] = replaced_after(agents, node_id, handle)
                if killed["replaced_after_s"] is not None:
                    starting = agents._agents[node_id].ready
                # The PromQL path's agent of the same node reads the same replicas (the placement is a function of
                # the targets and the alive nodes): its process dies.
                of_promql = [a for a in node_agents_of_others() if a["Address"]["NodeID"] == node_id]
                for actor in of_promql:
                    os.kill(actor["Pid"], signal.SIGKILL)
                killed["promql_pids"] = [a["Pid"] for a in of_promql]
                down = next(i for i, r in enumerate(replicas) if r.url not in urls)  # on another node
            if step == DOWN_AFTER:
                outage["replica"], outage["down"] = down, traffic.down(down, replicas[down].process.go_down)
            if step == UP_AFTER:
                outage["up"] = traffic.up(down, replicas[down].process.come_up)
            if step == LEAVE_AFTER:  # the killed agent's node leaves: its targets move to the other nodes' agents
                cluster.remove_node(next(n for n in cluster.worker_nodes if n.node_id == killed["node"]))
        traffic.stop()
        after = agents.assignment()
        for bridge in bridges:
            bridge.close()
        os.write(to_test, CLOSED)
        outcome = {
            "without_ray": without_ray,
            "promql_boundary": promql_boundary,
            "before": before,
            "after": after,
            "killed": killed,
            "outage": outage,
            "hostports": [r.hostport for r in replicas],
            "completions": [[c.t, c.replica, c.tokens] for c in traffic.completions()],
            "records": {
                name: [
                    {"step": r.step, "start": r.window_start, "end": r.time, "values": r.values}
                    for r in (bridge.record(step) for step in range(1, STEPS + 1))
                    if r is not None
                ]
                for name, bridge in zip(("agents", "trainer", *PROMQL), bridges, strict=True)
            },
        }
        outcome["orphans"] = agents_after_their_trainer(cluster.address, targets, prometheus.url, temp)
        out.write_text(json.dumps(outcome), encoding="utf-8")
    finally:
        if traffic is not None:
            traffic.stop()
        for bridge in bridges:
            bridge.close()
        stack.close()  # the cluster
        for replica in replicas:
            replica.stop()
        shutil.rmtree(temp, ignore_errors=True)


def spread_over_the_nodes(cluster: Any, replicas: list[Any]) -> None:
    """Swap replicas (a new one on another port) until the placement gives every node of ``cluster`` some: the run
    kills the agent of a node that is not the trainer's and takes down a replica of another node, whichever node the
    driver attaches to. The placement hashes node ids, which are new in every cluster, so six replicas leave a node
    without any in about a quarter of the clusters, and all on one node in 1 of 243."""
    from tests.conftest import Replica

    nodes = [
        {"NodeID": n.node_id, "NodeManagerAddress": n.node_ip_address, "Alive": True} for n in cluster.list_all_nodes()
    ]
    for _ in range(100):
        assigned = assign_targets([r.url for r in replicas], nodes, nodes[0]["NodeID"])
        if len(assigned) == len(nodes):
            return
        crowded = max(assigned.values(), key=len)
        index = next(i for i, r in enumerate(replicas) if r.url == crowded[0])
        replicas[index].stop()
        replicas[index] = Replica()
    raise RuntimeError(f"no placement of {len(replicas)} replicas over {len(nodes)} nodes used them all")


def replaced_after(agents: Any, node_id: str, killed: Any) -> float | None:
    """Seconds until ``agents`` placed a new agent on ``node_id`` in place of the ``killed`` one, asking nothing of
    it meanwhile (no boundary, no window); ``None`` when it did not within :data:`REPLACED_WITHIN_S`."""
    began = time.monotonic()
    while time.monotonic() - began < REPLACED_WITHIN_S:
        with agents._lock:
            current = agents._agents.get(node_id)
        if current is not None and current.handle is not killed:
            return time.monotonic() - began
        time.sleep(0.02)
    return None


def trainer(address: str, targets: list[str], prometheus: str, pids: Path) -> None:
    """A second trainer (its own process, a Ray driver of the same cluster): node agents for ``targets`` on the scrape
    path and the PromQL path's on ``prometheus`` (in its child process), two steps, the scrape path's agents' process
    ids into ``pids``; then it waits to be killed."""
    import ray

    from otel_bridge import Bridge

    ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    config = {
        "metrics": METRICS,
        "run": {"name": "killed", "dir": str(pids.parent / "runs")},
        "scrape": {"targets": targets, "sample_interval_s": 0.25, "readers": "node_agents"},
    }
    bridges = [Bridge.from_config(config), Bridge.from_config(promql_config(prometheus, "killed-promql", pids.parent))]
    for step in range(2):
        for bridge in bridges:
            bridge.log({}, step=step)
    agents = bridges[0]._producers[0]._agents.values()
    found = ray.get([agent.handle.__ray_call__.remote(lambda _self: os.getpid()) for agent in agents])
    pids.write_text(json.dumps(found), encoding="utf-8")
    time.sleep(RUN_TIMEOUT_S)


def agents_after_their_trainer(address: str, targets: list[str], prometheus: str, temp: Path) -> dict[str, Any]:
    """Start :func:`trainer`, kill it (SIGKILL, as a node's OOM killer would) once its agents run, and wait for its
    agents' processes to end (Ray ends the actors a dead driver owned; its PromQL child dies with it): which remain,
    and after how long. Its PromQL child's agents are the node agents of the cluster's actor table that were not alive
    before it started, less its own."""
    pids = temp / "agent-pids.json"
    code = (
        "from pathlib import Path; from tests.integration.test_node_agents import trainer; "
        f"trainer({address!r}, {targets!r}, {prometheus!r}, Path({str(pids)!r}))"
    )
    earlier = {a["ActorID"] for a in node_agents_of_others()}
    owner = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    try:
        deadline = time.monotonic() + 90
        while not pids.exists() and owner.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        found: list[int] = json.loads(pids.read_text(encoding="utf-8")) if pids.exists() else []
        promql = [a["Pid"] for a in node_agents_of_others() if a["ActorID"] not in earlier and a["Pid"] not in found]
    finally:
        owner.kill()
        owner.wait()
    killed = time.monotonic()
    alive = [*found, *promql]
    while alive and time.monotonic() < killed + 60:
        alive = [pid for pid in alive if _exists(pid)]
        time.sleep(0.2)
    return {"agents": found, "promql_agents": promql, "remaining": alive, "after_s": time.monotonic() - killed}


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def message(pipe: int, deadline: float) -> bytes:
    """The child's next message on ``pipe`` (``b""``: the child ended), waiting until ``deadline`` at most."""
    readable, _, _ = select.select([pipe], [], [], max(0.0, deadline - time.monotonic()))
    if not readable:
        raise TimeoutError(f"no word from the run in {RUN_TIMEOUT_S}s")
    return os.read(pipe, 1)


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The child's outcome, its steps run on a machine this process saturates (between the child's :data:`READY` and
    :data:`CLOSED`); ``load`` is when the load ran (``time.time()``)."""
    pytest.importorskip("ray", reason="needs ray: the ray extra")
    out = tmp_path_factory.mktemp("node-agents") / "outcome.json"
    log = out.parent / "run.log"
    to_test, from_run = os.pipe()
    from_test, to_run = os.pipe()
    code = (
        "from tests.integration.test_node_agents import run; from pathlib import Path; "
        f"run(Path({str(out)!r}), {from_run}, {from_test})"
    )
    load: dict[str, float] = {}
    with log.open("w", encoding="utf-8") as output:  # a file, not a pipe: nobody reads it while the run waits
        child = subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            start_new_session=True,  # its own process group: the Ray processes it starts end with it
            stdout=output,
            stderr=subprocess.STDOUT,
            pass_fds=(from_run, from_test),
        )
    os.close(from_run)  # the child's ends: its exit closes the pipe to this process
    os.close(from_test)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        if message(to_test, deadline) == READY:
            with CPULoad():
                load["from"] = time.time()
                os.write(to_run, LOADED)
                message(to_test, deadline)  # CLOSED, or b"" if the run failed
                load["to"] = time.time()
        child.wait(timeout=max(0.0, deadline - time.monotonic()))
    finally:
        os.close(to_test)
        os.close(to_run)
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        with contextlib.suppress(ProcessLookupError):  # what the child left running (a Ray process it started)
            os.killpg(child.pid, signal.SIGKILL)
    (out.parent / "load.json").write_text(json.dumps(load), encoding="utf-8")  # beside run.log, when it ran
    text = log.read_text(encoding="utf-8")
    assert child.returncode == 0, f"the run failed:\n{text[-6000:]}"
    result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    result["output"] = text
    result["load"] = load
    return result


def completed(outcome: dict[str, Any], replica: int, start: float, end: float) -> int:
    return sum(tokens for t, r, tokens in outcome["completions"] if r == replica and start < t <= end)


def value_of(record: dict[str, Any], hostport: str) -> float | None:
    key = f"{TOKENS}/instance.{hostport.replace(':', '_')}"
    found = [v for k, v in record["values"].items() if k == key]
    assert len(found) <= 1, f"several keys for {hostport}: {found}"
    return found[0] if found else None


def test_the_agents_read_every_node(outcome: dict[str, Any]) -> None:
    before = outcome["before"]
    assert len(before) == 3, f"six loopback replicas spread over the three nodes of one machine: {before}"
    assert sorted(t for urls in before.values() for t in urls) == sorted(
        f"http://{h}/metrics" for h in outcome["hostports"]
    )


def test_every_step_ran_on_a_saturated_machine(outcome: dict[str, Any]) -> None:
    """Every boundary of every bridge (from the first step's start to the last one's end) was taken while every core
    was busy."""
    load = outcome["load"]
    for name, records in outcome["records"].items():
        assert load["from"] < records[0]["start"], f"{name}: the first step began before the load ({load})"
        assert records[-1]["end"] < load["to"], f"{name}: the last step ended after the load ({load})"


def unread_key(hostport: str) -> str:
    return UNREAD_PREFIX + hostport.replace(":", "_")


def killed_of(outcome: dict[str, Any]) -> set[str]:
    """The ``host:port`` of the replicas the killed agent read."""
    return {url.split("//")[1].split("/")[0] for url in outcome["killed"]["targets"]}


def outage(records: list[dict[str, Any]], hostport: str) -> tuple[int, int]:
    """The steps from the first that names ``hostport`` unread to the first that reads it again (that one counts
    from the new agent's first reading): the steps a killed agent's replica is not exact in."""
    named = [r["step"] for r in records if unread_key(hostport) in r["values"]]
    assert named, f"{hostport}'s agent was killed after step {KILL_AFTER} and no record names it unread"
    assert named[-1] < records[-1]["step"], f"{hostport} was never read again: its agent was not replaced"
    return named[0], named[-1] + 1


def test_every_step_matches_the_truth(outcome: dict[str, Any]) -> None:
    """Every step of every replica on every bridge (the PromQL path's counters too, from its agents' boundary
    readings) but the steps that name it unread (what was counted meanwhile is checked by the run's sum). A killed
    agent's replicas are checked in the steps between (read by the replacement on their node) and from the one that
    reads them again: a new agent's first reading stands for the boundary before it, read late by as much as that
    step's ``boundary_lag_s`` reports (seconds on the saturated machine, where a new agent's worker process starts
    slowly)."""
    errors = []
    for name, records in outcome["records"].items():
        assert [r["step"] for r in records] == list(range(1, STEPS + 1)), f"{name}: records missing"
        for replica, hostport in enumerate(outcome["hostports"]):
            for record in records:
                if unread_key(hostport) in record["values"]:
                    continue
                reach = max(BAND_S, record["values"].get(LAG_KEY, 0.0) + 0.1)
                value = value_of(record, hostport)
                truth = completed(outcome, replica, record["start"], record["end"])
                below = completed(outcome, replica, record["start"], record["start"] + reach)
                above = completed(outcome, replica, record["end"], record["end"] + reach)
                if value is None or not truth - below <= value <= truth + above:
                    errors.append(
                        f"{name} step {record['step']} {hostport}: {value} vs truth {truth} (-{below}/+{above})"
                    )
    assert not errors, "\n".join(errors)


def test_the_runs_sum_is_exact_but_what_no_agent_read(outcome: dict[str, Any]) -> None:
    """Exact for every replica the trainer reads and every replica of a living agent; a killed agent's replicas
    lose at most what they completed from the start of the steps that named them unread to the new agent's first
    reading (the step after them: its end, plus its lag)."""
    killed = killed_of(outcome)
    assert killed
    for name, records in outcome["records"].items():
        start, end = records[0]["start"], records[-1]["end"]
        for replica, hostport in enumerate(outcome["hostports"]):
            total = sum(value_of(r, hostport) or 0.0 for r in records)
            truth = completed(outcome, replica, start, end)
            if replica == outcome["outage"]["replica"]:
                continue  # test_a_restart_is_named_and_counted
            if name == "trainer" or hostport not in killed:
                assert total == truth, f"{name} {hostport}: run's sum {total} vs truth {truth}"
                continue
            first, last = outage(records, hostport)
            steps = {r["step"]: r for r in records}
            read_again = steps[last]["end"] + steps[last]["values"][LAG_KEY] + BAND_S  # the new agent's first reading
            lost = completed(outcome, replica, steps[first]["start"], read_again)
            assert truth - lost <= total <= truth, f"{hostport}: run's sum {total} vs truth {truth} (lost <= {lost})"


def test_a_dead_agent_is_replaced_as_soon_as_ray_reports_its_death(outcome: dict[str, Any]) -> None:
    """An agent killed between two windows is replaced without waiting for a window to ask it for its partial: a run
    whose steps come minutes apart (or whose loop stalls) has its node's targets read again within seconds, not one
    step later."""
    replaced = outcome["killed"]["replaced_after_s"]
    assert replaced is not None, f"the killed agent was not replaced within {REPLACED_WITHIN_S}s without a window"


def test_a_replacement_names_its_targets_unread_in_the_windows_it_did_not_read_whole(outcome: dict[str, Any]) -> None:
    """The step in which the agent was killed began before its replacement existed, and the next one after the
    replacement was placed but before it started (it began at once): the replacement read their targets late, from its
    first reading on, and both steps name them unread rather than passing what they counted from that reading on for
    the whole step."""
    killed = outcome["killed"]
    assert killed["begun_while_starting"], "the replacement had started before the next step began: nothing checked"
    steps = {r["step"]: r for r in outcome["records"]["agents"]}
    assert steps[KILL_AFTER + 1]["start"] < killed["at"] < steps[KILL_AFTER + 1]["end"]
    for step in (KILL_AFTER + 1, KILL_AFTER + 2):  # log(step) ends the step's window
        unnamed = sorted(h for h in killed_of(outcome) if unread_key(h) not in steps[step]["values"])
        assert not unnamed, f"step {step} does not name {unnamed} unread; their replacement did not read it whole"


def test_a_leaving_nodes_targets_move_to_the_other_nodes(outcome: dict[str, Any]) -> None:
    """The killed agent's replacement on its node read its targets until that node left the cluster; then every
    target is read by the agent of a node that is still there (they are one machine), once."""
    node = outcome["killed"]["node"]
    after = outcome["after"]
    assert node not in after, f"the node that left still has an agent: {after}"
    assert sorted(t for urls in after.values() for t in urls) == sorted(
        f"http://{h}/metrics" for h in outcome["hostports"]
    )


def test_agents_end_with_their_trainer(outcome: dict[str, Any]) -> None:
    """A trainer killed outright leaves no agent behind: Ray ends the actors its driver owned, and those its PromQL
    child owned once the child dies with it."""
    orphans = outcome["orphans"]
    assert orphans["agents"], "the second trainer's agents never ran"
    assert orphans["promql_agents"], "the second trainer's PromQL child ran no agents"
    assert not orphans["remaining"], f"agents still running {orphans['after_s']:.1f}s after their trainer was killed"


def test_a_restart_is_named_and_counted(outcome: dict[str, Any]) -> None:
    """Every bridge names the replica that went down unread, counts its failed scrapes, and counts the new process from
    zero: the run's sum is the truth less what it completed after the last reading before it went down."""
    replica, down = outcome["outage"]["replica"], outcome["outage"]["down"]
    hostport = outcome["hostports"][replica]
    for name, records in outcome["records"].items():
        named = [r for r in records if unread_key(hostport) in r["values"]]
        assert named, f"{name}: {hostport} was down for three steps and no record names it unread"
        errors = records[-1]["values"].get(SCRAPE_ERRORS_PREFIX + hostport.replace(":", "_"), 0.0)
        assert errors > 0, f"{name}: {hostport}'s failed scrapes are not counted"
        last_read = named[0]["end"] - named[0]["values"][unread_key(hostport)]
        lost = completed(outcome, replica, last_read, down)
        band = completed(outcome, replica, last_read, last_read + BAND_S)  # rendered a moment after it was asked
        total = sum(value_of(r, hostport) or 0.0 for r in records)
        truth = completed(outcome, replica, records[0]["start"], records[-1]["end"])
        assert truth - lost <= total <= truth - lost + band, f"{name} {hostport}: {total} vs {truth} less {lost}"


def test_the_promql_path_reads_its_boundaries_through_node_agents(outcome: dict[str, Any]) -> None:
    """With ``boundary: auto`` and more targets than ``boundary_max_targets``, the PromQL path's windows are bounded
    by Prometheus' samples without Ray and by its node agents' boundary readings on the cluster (its counters checked
    exact above); its gauge still comes from Prometheus, and its agent of the killed node was killed."""
    assert outcome["without_ray"] == dict.fromkeys(PROMQL, "samples")
    assert outcome["promql_boundary"] == dict.fromkeys(PROMQL, "scrape")
    assert len(outcome["killed"]["promql_pids"]) == len(PROMQL), "a PromQL child ran no agent on the killed node"
    for name in PROMQL:
        records = outcome["records"][name]
        assert any(GAUGE_KEY in r["values"] for r in records), f"{name}: no {GAUGE_KEY} from Prometheus in any step"
