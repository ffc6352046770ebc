"""A simulated node: the node agent's own code (:class:`otel_bridge.producers.scrape.agent.NodeAgent`, the class the Ray
actor runs, not a copy) in a process of its own, told of boundaries and asked for partials over a pipe instead of by
Ray.

:class:`SimulatedNodes` starts one such process per simulated node (``multiprocessing``'s spawn: a fresh interpreter,
as a Ray worker is) and is, on the trainer's side, what :class:`~otel_bridge.producers.scrape.NodeAgents` is: a
boundary is put on a queue (a thread tells every node), and a window is every node's partial, unpickled here and
merged with :func:`~otel_bridge.producers.partials.merge_window` (the function ``NodeAgents.produce`` merges with).
What it does not have is Ray: no placement, no object store, no replacement of a dead agent. The bytes a node sends
are counted as the pickle (protocol 5, what Ray serializes a dataclass with) of its
:class:`~otel_bridge.producers.partials.WindowPartial`; Ray's own framing is not in it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import pickle
import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from otel_bridge.producers import MetricQuery, WindowPartial, merge_window
from otel_bridge.window import StepWindow


def _node_main(
    conn: Connection, node: str, targets: dict[str, float], queries: list[MetricQuery], options: dict[str, Any]
) -> None:
    """The simulated node's process: a :class:`NodeAgent` driven by the messages on ``conn``."""
    from otel_bridge.producers.scrape import NodeAgent

    agent = NodeAgent(node, targets, queries, options)
    agent.start()
    send = threading.Lock()
    conn.send_bytes(pickle.dumps(("started", node)))

    def answer(window: StepWindow, timeout_millis: float) -> None:
        payload = pickle.dumps(agent.partial(window, timeout_millis), protocol=5)
        with send:
            conn.send_bytes(payload)

    while True:
        try:
            message = pickle.loads(conn.recv_bytes())
        except EOFError:
            break
        if message[0] == "boundary":
            agent.on_boundary(message[1])
        elif message[0] == "partial":  # answered on a thread: a boundary is taken while a partial waits
            threading.Thread(target=answer, args=message[1:], daemon=True).start()
        else:
            break
    agent.close()


@dataclass
class _Node:
    name: str
    process: Any
    conn: Connection
    lock: threading.Lock


class SimulatedNodes:
    """One process per entry of ``assignment`` (node name -> target URLs), each running a NodeAgent of its targets for
    ``queries`` with the scrape producer's ``options``; the trainer side of :class:`NodeAgents` without Ray."""

    def __init__(
        self, assignment: dict[str, list[str]], queries: Sequence[MetricQuery], options: dict[str, Any], since: float
    ) -> None:
        context = multiprocessing.get_context("spawn")
        self._queries = list(queries)
        self.nodes: list[_Node] = []
        self.received_bytes: list[int] = []  # per node, the last window's partial
        for name, urls in assignment.items():
            parent, child = context.Pipe()
            process = context.Process(
                target=_node_main,
                args=(child, name, {u: since for u in urls}, self._queries, options),
                name=f"simulated-node-{name}",
                daemon=True,
            )
            process.start()
            child.close()
            self.nodes.append(_Node(name, process, parent, threading.Lock()))
        self._boundaries: queue.SimpleQueue[float | None] = queue.SimpleQueue()
        self._teller = threading.Thread(target=self._tell, name="simulated-nodes-teller", daemon=True)

    @property
    def pids(self) -> list[int]:
        """The simulated nodes' process ids."""
        return [int(node.process.pid) for node in self.nodes]

    def start(self) -> None:
        """Wait until every node has read its targets once; start telling them of boundaries."""
        for node in self.nodes:
            pickle.loads(node.conn.recv_bytes())
        self._teller.start()

    def _send(self, node: _Node, message: tuple[Any, ...]) -> None:
        with node.lock:
            node.conn.send_bytes(pickle.dumps(message))

    def _tell(self) -> None:
        while True:
            t = self._boundaries.get()
            if t is None:
                return
            for node in self.nodes:
                self._send(node, ("boundary", t))

    def on_boundary(self, t: float) -> None:
        """A boundary at unix time ``t``: queued for the nodes (never blocks), as ``NodeAgents.on_boundary``."""
        self._boundaries.put(t)

    def produce(self, timeout_millis: float = 10_000, *, window: StepWindow) -> list[Any]:
        """Every node's partial of ``window``, merged: the window's metrics (and its report, dropped here)."""
        for node in self.nodes:
            self._send(node, ("partial", window, timeout_millis))
        partials: list[WindowPartial] = []
        sizes = []
        for node in self.nodes:
            payload = node.conn.recv_bytes()
            sizes.append(len(payload))
            partials.append(pickle.loads(payload))
        self.received_bytes = sizes
        metrics, _report = merge_window(self._queries, partials, window)
        return metrics

    def close(self) -> None:
        """Stop telling; end every node's process (by its handle)."""
        self._boundaries.put(None)
        for node in self.nodes:
            with contextlib.suppress(OSError):  # a node already gone
                self._send(node, ("close",))
            node.conn.close()
        for node in self.nodes:
            node.process.join(timeout=10)
            if node.process.is_alive():
                node.process.kill()
                node.process.join(timeout=5)
