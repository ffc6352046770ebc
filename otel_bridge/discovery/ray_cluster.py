"""Everything that asks the running Ray cluster: the only module of otel-bridge that imports ``ray``.

``ray`` is an optional extra (``pip install './otel-bridge[ray]'``, from the clone), imported lazily by
:func:`import_ray`. Nothing here starts a cluster, and only :func:`join_cluster` connects to one (a process of the
bridge's own joining the cluster its trainer is connected to, :class:`RayConnection`): otherwise the caller's process
must have called ``ray.init()`` already, and the functions raise :class:`~otel_bridge.errors.DiscoveryError` saying
so. Node selection itself is pure (:func:`alive_nodes`, :func:`select_head_node`) so that it can be tested without Ray.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from otel_bridge.errors import ConfigError, DiscoveryError, install_hint

_log = logging.getLogger(__name__)

HEAD_RESOURCE = "node:__internal_head__"
"""The resource Ray gives the head node only (``ray.nodes()[i]["Resources"]``)."""

RAY_INSTALL_HINT = install_hint("ray")

NodeInfo = Mapping[str, Any]


def import_ray() -> ModuleType:
    """Import ``ray`` now; :class:`ConfigError` with the install command when it is not installed."""
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise ConfigError(
            f"Ray discovery needs the ray package, which is not importable ({exc}): {RAY_INSTALL_HINT}, "
            "or configure the address explicitly instead of discovering it from Ray"
        ) from None


def require_initialized() -> ModuleType:
    """The ``ray`` module, when this process has called ``ray.init()``; otherwise :class:`DiscoveryError`."""
    ray = import_ray()
    if not ray.is_initialized():
        raise DiscoveryError(
            "Ray is not initialised in this process: call ray.init() (or ray.init(address='auto') to join a "
            "running cluster) before discovering from Ray, or configure the address explicitly"
        )
    return ray


def format_hostport(host: str, port: int) -> str:
    """``host:port``, with an IPv6 host in brackets (``[::1]:9090``)."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


def _is_alive(node: NodeInfo) -> bool:
    return bool(node.get("Alive", node.get("alive", False)))


def _node_id(node: NodeInfo) -> str:
    return str(node.get("NodeID", "?"))


def alive_nodes(nodes: Sequence[NodeInfo]) -> list[NodeInfo]:
    """The nodes of a ``ray.nodes()`` answer that are alive."""
    return [node for node in nodes if _is_alive(node)]


def select_head_node(nodes: Sequence[NodeInfo]) -> NodeInfo:
    """The one alive node holding resource ``node:__internal_head__``.

    Raises :class:`DiscoveryError` when no node is alive, none of the alive nodes is the head, or several are: no
    node is ever picked arbitrarily.
    """
    alive = alive_nodes(nodes)
    if not alive:
        raise DiscoveryError(
            f"ray.nodes() lists {len(nodes)} node(s) and none is alive: start the Ray cluster, "
            "or configure the Prometheus URL explicitly"
        )
    heads = [node for node in alive if HEAD_RESOURCE in (node.get("Resources") or {})]
    if not heads:
        raise DiscoveryError(
            f"none of the {len(alive)} alive Ray node(s) holds resource {HEAD_RESOURCE!r}, so the head node is "
            "unknown: configure the Prometheus URL explicitly"
        )
    if len(heads) > 1:
        listed = ", ".join(f"{_node_id(n)} at {n.get('NodeManagerAddress')}" for n in heads)
        raise DiscoveryError(
            f"{len(heads)} alive Ray nodes hold resource {HEAD_RESOURCE!r} ({listed}); refusing to choose one: "
            "configure the Prometheus URL explicitly"
        )
    head = heads[0]
    address = head.get("NodeManagerAddress")
    if not isinstance(address, str) or not address:
        raise DiscoveryError(
            f"the Ray head node {_node_id(head)} has no NodeManagerAddress in ray.nodes(): "
            "configure the Prometheus URL explicitly"
        )
    return head


def cluster_nodes() -> list[NodeInfo]:
    """``ray.nodes()`` of the cluster this process is connected to (:class:`DiscoveryError` if not initialised)."""
    ray = require_initialized()
    nodes: list[NodeInfo] = list(ray.nodes())
    return nodes


def head_node_address() -> str:
    """The ``NodeManagerAddress`` of the running cluster's head node (see :func:`select_head_node`)."""
    head = select_head_node(cluster_nodes())
    return str(head["NodeManagerAddress"])


def node_metrics_targets(nodes: Sequence[NodeInfo]) -> list[str]:
    """``NodeManagerAddress:MetricsExportPort`` of each alive node, sorted.

    A node that reports no export port is named in a WARNING and left out; :class:`DiscoveryError` when no node is
    alive or none has an export port.
    """
    alive = alive_nodes(nodes)
    if not alive:
        raise DiscoveryError(f"ray.nodes() lists {len(nodes)} node(s) and none is alive: start the Ray cluster")
    targets: set[str] = set()
    for node in alive:
        address = node.get("NodeManagerAddress")
        port = node.get("MetricsExportPort")
        if not isinstance(address, str) or not address or not isinstance(port, int) or not 0 < port < 65536:
            _log.warning(
                "Ray node %s reports no usable metrics export address (NodeManagerAddress=%r, MetricsExportPort=%r); "
                "it is not scraped",
                _node_id(node),
                address,
                port,
            )
            continue
        targets.add(format_hostport(address, port))
    if not targets:
        raise DiscoveryError(
            f"none of the {len(alive)} alive Ray node(s) reports a MetricsExportPort: install 'ray[default]' "
            "on the cluster (the metrics agent is part of it)"
        )
    return sorted(targets)


def ray_node_targets() -> list[str]:
    """The metrics export targets (``host:port``) of the running cluster's alive nodes, from ``ray.nodes()``."""
    targets = node_metrics_targets(cluster_nodes())
    _log.info("Ray nodes' metrics export targets: %s", ", ".join(targets))
    return targets


@dataclass(frozen=True, slots=True)
class SessionDirs:
    """The running Ray session's directories, as the Ray API reports them."""

    temp_dir: Path
    session_dir: Path


def session_dirs() -> SessionDirs:
    """The temp and session directories of the Ray session this process is connected to.

    Uses the driver's node object (``ray._private.worker.global_worker.node``): Ray has no public API for these.
    Raises :class:`DiscoveryError` when Ray is not initialised or this Ray version lacks that object.
    """
    ray = require_initialized()
    try:
        node = ray._private.worker.global_worker.node
        temp_dir = node.get_temp_dir_path()
        session_dir = node.get_session_dir_path()
    except AttributeError as exc:
        raise DiscoveryError(
            f"this Ray version ({getattr(ray, '__version__', '?')}) does not report its session directories "
            f"({exc}): pass the Ray temp dir (ray start --temp-dir) or the service-discovery file path explicitly"
        ) from None
    if not temp_dir or not session_dir:
        raise DiscoveryError(
            "Ray reports no temp/session directory for this session: pass the Ray temp dir (ray start --temp-dir) "
            "or the service-discovery file path explicitly"
        )
    return SessionDirs(Path(temp_dir), Path(session_dir))


def actor_metrics_addresses(handles: Sequence[Any], method: str, timeout_s: float) -> list[str]:
    """Call ``handle.<method>.remote()`` on every actor handle and wait (at most ``timeout_s``) for the answers.

    Raises :class:`ConfigError` when a handle has no such method, :class:`DiscoveryError` when the calls fail or time
    out, or an answer is not a string.
    """
    ray = require_initialized()
    refs = []
    for index, handle in enumerate(handles):
        remote_method = getattr(handle, method, None)
        if remote_method is None or not hasattr(remote_method, "remote"):
            raise ConfigError(
                f"rollout server actor #{index} ({type(handle).__name__}) has no remote method {method!r}: define "
                f"`def {method}(self) -> str` returning 'host:port' on the actor class, or pass another method name"
            )
        refs.append(remote_method.remote())
    try:
        answers = ray.get(refs, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise DiscoveryError(
            f"{len(refs)} rollout server actor(s) did not answer {method}() within {timeout_s}s: check that the "
            "actors are alive, or raise the timeout"
        ) from None
    except ray.exceptions.RayError as exc:
        raise DiscoveryError(f"asking rollout server actors for {method}() failed: {exc}") from exc
    out = []
    for index, answer in enumerate(answers):
        if not isinstance(answer, str):
            raise DiscoveryError(
                f"rollout server actor #{index} answered {method}() with {type(answer).__name__} {answer!r}: "
                "it must return a 'host:port' string"
            )
        out.append(answer)
    return out


def driver_node_id() -> str:
    """The Ray node id of the node this process (the trainer, Ray's driver) runs on."""
    ray = require_initialized()
    return str(ray.get_runtime_context().get_node_id())


def alive_node_count() -> int | None:
    """How many nodes of the Ray cluster this process is connected to are alive; ``None`` when Ray is not installed or
    not initialised here (nothing is started or connected)."""
    try:
        ray = importlib.import_module("ray")
    except ImportError:
        return None
    if not ray.is_initialized():
        return None
    return len(alive_nodes(list(ray.nodes())))


@dataclass(frozen=True, slots=True)
class RayConnection:
    """How another process joins the Ray cluster this one is connected to, as a Ray driver of its own: the cluster's
    GCS address, this process' namespace and runtime environment (so the actors that process starts run in the
    trainer's environment). Picklable: handed to a child process (:func:`join_cluster`)."""

    gcs_address: str
    namespace: str
    runtime_env: dict[str, Any] = field(default_factory=dict)


def this_connection() -> RayConnection:
    """The :class:`RayConnection` of the cluster this process is connected to (:class:`DiscoveryError` if none)."""
    ray = require_initialized()
    context = ray.get_runtime_context()
    return RayConnection(str(context.gcs_address), str(context.namespace), dict(context.runtime_env or {}))


class _SigtermNotice(logging.Filter):
    """Drops Ray's notice that a driver connected from another thread than the main one sets no SIGTERM handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("SIGTERM handler is not set")


def join_cluster(connection: RayConnection) -> ModuleType:
    """Connect this process to the cluster of ``connection`` as a driver of its own (its actors are owned by this
    process and end with it); the ``ray`` module. Ray's own log lines at WARNING and above only; its actors' output
    is not streamed here (their log files on their nodes hold it). This process' default SIGTERM handling stays: a
    process of the bridge's own ends with its parent, not through Ray's handler. :class:`DiscoveryError` when the
    cluster cannot be joined (it is gone, or unreachable from here)."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    notice = _SigtermNotice()
    worker_log = logging.getLogger("ray._private.worker")
    worker_log.addFilter(notice)
    try:
        ray.init(
            address=connection.gcs_address,
            namespace=connection.namespace,
            runtime_env=connection.runtime_env or None,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
    except (OSError, RuntimeError, ValueError, ray.exceptions.RayError) as exc:
        raise DiscoveryError(
            f"cannot join the Ray cluster at {connection.gcs_address} (the trainer's): {exc}; "
            "set scrape.readers: trainer to read the targets from the trainer's process instead"
        ) from exc
    finally:
        worker_log.removeFilter(notice)
    return ray


def leave_cluster() -> None:
    """Disconnect this process from Ray (:func:`join_cluster`'s counterpart; its actors end)."""
    ray = import_ray()
    if ray.is_initialized():
        ray.shutdown()
