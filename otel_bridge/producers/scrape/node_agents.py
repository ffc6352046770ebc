"""NodeAgents: the scrape path read on every node of a Ray cluster (``scrape.readers: node_agents``).

One lightweight Ray actor per node that hosts targets (:class:`~otel_bridge.producers.scrape.agent.NodeAgent`:
``num_cpus=0``, pinned to its node with ``NodeAffinitySchedulingStrategy(soft=False)``) reads that node's
targets exactly as the scrape path reads them in one process, at every boundary and every ``sample_interval_s``, and
answers each window with its mergeable partial statistics; this side merges them
(:func:`~otel_bridge.producers.partials.merge_window`) into the same numbers one process reading every target gives.
What crosses the network per window grows with nodes x configured metrics x label groups, not with targets or samples.

- **Placement**: each target is read by the agent of the node it runs on
  (:func:`~otel_bridge.producers.scrape._internal.placement.assign_targets`), re-placed whenever the targets change
  (the watcher's ``set_targets``): a target that moved node is read by its new node's agent from its first reading
  there on, and an agent whose node has no target left is ended.
- **Boundaries**: :meth:`NodeAgents.on_boundary` only puts the time on a queue (the training thread's cost is that
  of the scrape path in one process); a thread of this object tells every agent.
- **Lifetime**: the actors are owned by this process (not detached), so they end with the run (Ray ends an actor
  whose owner died) and at :meth:`NodeAgents.close`. In a process of the bridge's own (the PromQL child, which takes
  its boundary readings through them), this object joins the trainer's cluster as a Ray driver of that process
  (``cluster``) and leaves it at close: the agents are that process', which ends with the trainer.
- **Faults**: an agent that died (its process, or its node) is replaced on its node while the node is alive, as soon
  as Ray reports its death to this process (a call of the agent's that lasts its lifetime fails then), without
  waiting for a window to ask it; its targets are unread (``otel_bridge/unread_s/instance.<host:port>``) in every
  window its replacement could not read whole: each that ended before the replacement answered, and each that began
  before the replacement had them (their readings at its start died with the old agent: the agent names them,
  :class:`~otel_bridge.producers.scrape.agent.NodeAgent`). What they counted
  between the dead agent's last window and the new agent's first reading is in no step, and those records say from
  when. The same holds for a target handed to another agent (its node left, or it moved). An agent that does not
  answer within the window's budget leaves its targets unread in that window only.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.sdk.metrics.export import ScopeMetrics

from otel_bridge.discovery.ray_cluster import (
    RayConnection,
    cluster_nodes,
    driver_node_id,
    join_cluster,
    leave_cluster,
    require_initialized,
)
from otel_bridge.health import SCRAPE_ERRORS, Health
from otel_bridge.producers.base import infra_scope
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.producers.partials import MetricPartial, WindowPartial, merge_window
from otel_bridge.producers.scrape._internal.arguments import check_reader, target_url
from otel_bridge.producers.scrape._internal.placement import assign_targets
from otel_bridge.producers.scrape.agent import NodeAgent
from otel_bridge.producers.scrape.producer import reading_wait_s
from otel_bridge.producers.statistics import ImpossibleValues
from otel_bridge.producers.window_report import UnreadTarget, WindowReporter
from otel_bridge.ratelimit import RateLimitedLogger
from otel_bridge.suppression import suppressing
from otel_bridge.window import StepWindow

__all__ = ["NodeAgents"]

_log = logging.getLogger(__name__)
_AGENT_CONCURRENCY = 4  # a boundary is taken while a window's partial waits for its readings
_WATCH_PERIOD_S = 1.0  # how often the watcher takes in newly placed agents (a death is seen as Ray reports it)
_READER = "its node's agent"  # who has no reading of a target, in the unread warning


@dataclass
class _Agent:
    """One node's agent: its actor, the targets it reads, its start (an ``ObjectRef`` until it answered) and its
    lifetime (``watch``: an ``ObjectRef`` that fails when the actor dies)."""

    node_id: str
    handle: Any
    targets: list[str]
    ready: Any
    watch: Any
    started: bool = False


def _instance(url: str) -> str:
    return urlsplit(url).netloc


class NodeAgents:
    """A :class:`~otel_bridge.producers.scrape.Scraper` read by one agent per node (see the module docstring).
    ``options`` are the scrape producer's (``transport``, ``sample_interval_s``, ``max_series``), given to every
    agent; the configured metrics' types must be known (``metrics[].type``). ``cluster``: the Ray cluster to join at
    :meth:`start` (this process becomes a driver of its own, and leaves at :meth:`close`); ``None``: Ray must be
    initialised in this process already."""

    def __init__(
        self,
        targets: Sequence[str],
        queries: Sequence[MetricQuery],
        *,
        health: Health | None = None,
        produce_timeout_s: float = 30.0,
        warn_interval_s: float = 60.0,
        start_timeout_s: float = 60.0,
        discovered: bool = False,
        cluster: RayConnection | None = None,
        **options: Any,
    ) -> None:
        check_reader(targets, queries, discovered=discovered, needs_types=True)
        self._cluster = cluster
        self._joined = False
        self._queries = list(queries)
        self._options = {"produce_timeout_s": produce_timeout_s, "warn_interval_s": warn_interval_s, **options}
        self._produce_timeout_s = produce_timeout_s
        self._start_timeout_s = start_timeout_s
        self._health = health or Health()
        self._warn = RateLimitedLogger(_log, warn_interval_s)
        self._reporter = WindowReporter(self._health, self._warn)
        self._impossible = ImpossibleValues(self._health, self._warn)
        self._lock = threading.RLock()  # guards the targets and the agents
        self._targets = [target_url(t) for t in dict.fromkeys(targets)]
        self._agents: dict[str, _Agent] = {}
        self._lost = False  # an agent is gone: place the targets again
        self._added: dict[str, float] = {}  # instance -> when it became a target
        self._last_read: dict[str, float] = {}  # instance -> the latest window end it was read at
        self._unread_now: list[str] = []
        self._boundaries: queue.SimpleQueue[float | None] = queue.SimpleQueue()
        self._teller: threading.Thread | None = None
        self._watcher: threading.Thread | None = None
        self._stopping = threading.Event()
        self._seen: set[Any] = set()  # the watch calls found ended (their agents are ended, or left to the next window)
        self._closed = False
        self._ray: Any = None
        self._actor: Any = None

    @property
    def queries(self) -> list[MetricQuery]:
        """The configured queries (their types known)."""
        return list(self._queries)

    def assignment(self) -> dict[str, list[str]]:
        """Node id -> the target URLs its agent reads now."""
        with self._lock:
            return {node_id: list(agent.targets) for node_id, agent in self._agents.items()}

    def start(self) -> None:
        """Place an agent on every node that hosts targets, wait (at most ``start_timeout_s``) until they have read
        their targets once, and start telling them of boundaries. Ray must be initialised in this process, or the
        ``cluster`` given joined (a :class:`~otel_bridge.errors.DiscoveryError` when it cannot be). The targets whose
        first reading failed, or whose agent has not started by then, are :meth:`unanswered` until the first
        window."""
        if self._cluster is not None:
            self._ray = join_cluster(self._cluster)
            self._joined = True
        else:
            self._ray = require_initialized()
        with self._lock:
            self._place()
            ready = {agent.ready: agent for agent in self._agents.values()}
        done = self._ray.wait(list(ready), num_returns=len(ready), timeout=self._start_timeout_s)[0] if ready else []
        silent: set[str] = set()
        for ref in done:
            if self._started(ready[ref]):
                silent.update(self._ray.get(ref))
        late = [agent for agent in ready.values() if not agent.started]
        silent.update(_instance(url) for agent in late for url in agent.targets)
        with self._lock:
            self._unread_now = sorted(silent)
        self._teller = threading.Thread(target=suppressing(self._tell), name="otel-bridge-node-agents", daemon=True)
        self._teller.start()
        self._watcher = threading.Thread(target=suppressing(self._watch), name="otel-bridge-agent-watch", daemon=True)
        self._watcher.start()
        if late:
            _log.warning(
                "%d node agent(s) did not start within %gs (%s): their targets are unread until they do",
                len(late),
                self._start_timeout_s,
                ", ".join(agent.node_id for agent in late),
            )

    def _started(self, agent: _Agent) -> bool:
        """Whether ``agent`` has started (asks without waiting); a start that failed ends the agent (replaced)."""
        if agent.started:
            return True
        done, _ = self._ray.wait([agent.ready], timeout=0)
        if not done:
            return False
        try:
            self._ray.get(agent.ready)
        except self._ray.exceptions.RayError as exc:
            self._warn.warning(
                f"agent-start:{agent.node_id}", "node agent on %s failed to start: %s", agent.node_id, exc
            )
            with self._lock:
                if self._agents.get(agent.node_id) is agent:
                    del self._agents[agent.node_id]
                    self._lost = True  # placed again after the window (its node may have left meanwhile)
            return False
        agent.started = True
        return True

    def _place(self) -> None:
        """Assign the targets to the alive nodes and bring the agents in line (the lock is held)."""
        now = time.time()
        for url in self._targets:
            if _instance(url) not in self._added:
                self._added[_instance(url)] = now
                self._health.count(SCRAPE_ERRORS, 0.0, labels={"instance": _instance(url)})  # its key from the start
        assignment = assign_targets(self._targets, cluster_nodes(), driver_node_id())
        for node_id in [n for n in self._agents if n not in assignment]:
            self._end(self._agents.pop(node_id))
        for node_id, urls in assignment.items():
            since = {url: self._added[_instance(url)] for url in urls}  # unread there until the agent reads them
            agent = self._agents.get(node_id)
            if agent is None:
                self._agents[node_id] = self._spawn(node_id, since)
            elif agent.targets != urls:
                agent.targets = urls
                agent.handle.set_targets.remote(since)

    def _spawn(self, node_id: str, targets: dict[str, float]) -> _Agent:
        ray = self._ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if self._actor is None:
            self._actor = ray.remote(NodeAgent)
        handle = self._actor.options(
            num_cpus=0,
            max_concurrency=_AGENT_CONCURRENCY + 1,  # and its watch, for its lifetime
            max_restarts=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
        ).remote(node_id, targets, self._queries, self._options)
        _log.info("node agent for %s: %d target(s)", node_id, len(targets))
        return _Agent(node_id, handle, list(targets), handle.start.remote(), handle.watch.remote())

    def _end(self, agent: _Agent) -> None:
        try:
            self._ray.kill(agent.handle)
        except Exception as exc:  # noqa: BLE001 - an agent already gone is what ending it wants
            _log.debug("ending node agent %s: %s", agent.node_id, exc)

    def _watch(self) -> None:
        """Replace each agent that dies after it started as soon as Ray reports it (its ``watch`` call fails), not at
        the next window. One whose start failed is placed again at the next window, as before its first: an agent
        that cannot start on a node (otel-bridge not importable there) is not spawned again and again meanwhile."""
        while True:
            with self._lock:
                if self._closed:
                    return
                self._seen &= {agent.watch for agent in self._agents.values()}
                watched = {agent.watch: agent for agent in self._agents.values() if agent.watch not in self._seen}
            if not watched:
                self._stopping.wait(_WATCH_PERIOD_S)  # every agent's death seen, or no agent: new ones come by _place
                continue
            done, _ = self._ray.wait(list(watched), num_returns=1, timeout=_WATCH_PERIOD_S)
            for ref in done:
                agent = watched[ref]
                self._seen.add(ref)
                if not self._started(agent):  # a start that failed: ended, and placed again at the next window
                    continue
                try:
                    self._ray.get(ref)
                    why = "its watch returned"  # only close() ends it, and then the agent is no longer current
                except self._ray.exceptions.RayError as exc:
                    why = type(exc).__name__
                self._replace([agent], why)

    def _replace(self, dead: Sequence[_Agent], why: str) -> None:
        """End the ``dead`` agents that are still current and place their targets again (a new agent on each one's
        node while that node lives, else elsewhere)."""
        with self._lock:
            for agent in dead:
                if self._closed or self._agents.get(agent.node_id) is not agent:
                    continue  # already replaced, or ended on purpose
                self._warn.warning(
                    f"agent-died:{agent.node_id}",
                    "the node agent of %s died (%s): its %d target(s) are unread until its replacement reads them",
                    agent.node_id,
                    why,
                    len(agent.targets),
                )
                del self._agents[agent.node_id]
                self._end(agent)
                self._lost = True
            if self._lost and not self._closed:
                self._lost = False
                self._place()

    def on_boundary(self, t: float) -> None:
        """A boundary at unix time ``t``: queued for the agents (never blocks)."""
        self._boundaries.put(t)

    def _tell(self) -> None:
        while True:
            t = self._boundaries.get()
            if t is None:
                return
            with self._lock:
                handles = [agent.handle for agent in self._agents.values()]
            for handle in handles:
                handle.on_boundary.remote(t)  # an agent that died is found (and replaced) by the window's reading

    def set_targets(self, targets: Sequence[str]) -> None:
        """Read these targets from now on, each by its node's agent (re-placed from ``ray.nodes()``)."""
        urls = [target_url(t) for t in dict.fromkeys(targets)]
        with self._lock:
            if self._closed:
                return
            self._targets = urls
            current = {_instance(url) for url in urls}
            for instance in [i for i in self._added if i not in current]:
                del self._added[instance]
                self._last_read.pop(instance, None)
                self._reporter.forget(instance)
                self._health.forget(SCRAPE_ERRORS, {"instance": instance})
            if self._ray is not None:
                self._place()

    def produce(self, timeout_millis: float = 10_000, *, window: StepWindow) -> list[ScopeMetrics]:
        """The window's statistics merged from every agent's partial; the targets of an agent that did not answer
        within the budget (or died: it is replaced) are unread in it."""
        with self._lock:
            agents = [agent for agent in list(self._agents.values()) if self._started(agent)]
            targets = list(self._targets)
        asked_at = time.monotonic()
        wait_s = min(self._produce_timeout_s, reading_wait_s(timeout_millis / 1000))
        asked = {agent.handle.partial.remote(window, wait_s * 1000): (agent, list(agent.targets)) for agent in agents}
        done, _ = self._ray.wait(list(asked), num_returns=len(asked), timeout=wait_s + 1.0) if asked else ([], [])
        partials: list[WindowPartial] = []
        read: set[str] = set()  # the targets an agent answered for
        dead: list[_Agent] = []
        for ref, (agent, reads) in asked.items():
            if ref not in done:
                continue
            try:
                partial: WindowPartial = self._ray.get(ref)
            except self._ray.exceptions.RayActorError:
                dead.append(agent)
                continue
            except self._ray.exceptions.RayError as exc:
                self._warn.error(f"agent-error:{agent.node_id}", "node agent of %s failed: %s", agent.node_id, exc)
                continue
            partials.append(partial)
            read.update(reads)
            for instance, failed in partial.scrape_errors.items():
                if instance in self._added:  # a target that left takes its key with it
                    self._health.count(SCRAPE_ERRORS, failed, labels={"instance": instance})
            for instance in map(_instance, reads):
                # a phase's window, read after its step's, ends earlier; one the agent could not read whole (it
                # began before the agent had the target) is unread since the last one read
                if instance not in partial.unread:
                    self._last_read[instance] = max(window.end, self._last_read.get(instance, -math.inf))
        missed = [url for url in targets if url not in read]  # no agent (yet), or its agent did not answer
        with self._lock:
            missed_instances = {
                _instance(url) for url in missed if self._added.get(_instance(url), math.inf) <= window.end
            }
            unread = {
                instance: window.end - self._last_read.get(instance, self._added[instance])
                for instance in missed_instances
            }
        empty = tuple(MetricPartial() for _ in self._queries)
        partials.append(WindowPartial(window, empty, unread=unread, reader=_READER))
        metrics, report = merge_window(self._queries, partials, window, self._impossible, reader=_READER)
        _log.debug(
            "step %d: %d node agent partial(s) in %.3fs, %d unread",
            window.step,
            len(partials) - 1,
            time.monotonic() - asked_at,
            len(unread),
        )
        with self._lock:
            current = set(self._added)
            report.unread = [  # a target another agent read before this one: unread since that reading
                UnreadTarget(
                    target.instance,
                    min(target.seconds, window.end - self._last_read.get(target.instance, -math.inf)),
                    warn_key=f"unread:{target.instance}",
                )
                for target in report.unread or ()
                if target.instance in current
            ]
            self._unread_now = [target.instance for target in report.unread]
            self._reporter.publish(report)
        self._replace(dead, f"step {window.step}: its partial failed")
        return infra_scope(metrics)

    def unanswered(self) -> list[str]:
        """The targets (``host:port``) unread at the latest window's end (before the first: whose first reading
        failed)."""
        with self._lock:
            return sorted(self._unread_now)

    def close(self) -> None:
        """Stop telling the agents and end them."""
        with self._lock:
            self._closed = True
            agents = list(self._agents.values())
            self._agents.clear()
        self._stopping.set()
        self._boundaries.put(None)
        if self._teller is not None:
            self._teller.join(timeout=10)
        if self._watcher is not None:
            self._watcher.join(timeout=10)
        for agent in agents:
            self._end(agent)
        if self._joined:
            leave_cluster()
