"""Which node's agent reads which scrape target (``scrape.readers: node_agents``): pure, from ``ray.nodes()``.

A target runs on the node whose ``NodeManagerAddress`` (or ``NodeName``) is its host; a loopback host
(``127.0.0.1``, ``localhost``, ``::1``) is the trainer's own machine, the address of the trainer's node. Several
alive nodes at one address (several raylets on one machine) are one machine: any of them reads its targets over the
loopback as well as the others, so each target goes to one of them by rendezvous hashing (the node with the highest
hash of target and node id): the same node for the same target as long as that node lives, and a node that joins or
leaves moves only the targets it gains or had. A target on no alive node's address (a server outside the Ray
cluster) is read by the agent of the trainer's node, as the trainer itself would read it.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

__all__ = ["LOOPBACK", "assign_targets"]

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def _host(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


def _weight(target: str, node_id: str) -> int:
    return zlib.crc32(f"{node_id}|{target}".encode())


def assign_targets(
    targets: Sequence[str], nodes: Sequence[Mapping[str, Any]], driver_node_id: str
) -> dict[str, list[str]]:
    """Node id -> the target URLs its agent reads (see the module docstring); ``nodes`` is ``ray.nodes()``, of which
    only the alive ones count. Every target is assigned to exactly one node; nodes without targets are left out."""
    alive = [n for n in nodes if n.get("Alive", n.get("alive", False))]
    by_address: dict[str, list[str]] = {}
    driver_address: str | None = None
    for node in alive:
        node_id = str(node.get("NodeID"))
        for key in ("NodeManagerAddress", "NodeName"):
            address = str(node.get(key) or "").lower()
            if address and node_id not in by_address.setdefault(address, []):
                by_address[address].append(node_id)
        if node_id == driver_node_id:
            driver_address = str(node.get("NodeManagerAddress") or "").lower()
    assigned: dict[str, list[str]] = {}
    for target in targets:
        host = _host(target)
        if host in LOOPBACK and driver_address is not None:
            host = driver_address
        candidates = by_address.get(host) or ([driver_node_id] if driver_address is not None else [])
        if not candidates:
            continue  # the trainer's node is not alive in ray.nodes(): nobody to read it (named unread by the caller)
        node_id = max(candidates, key=lambda n: _weight(target, n))
        assigned.setdefault(node_id, []).append(target)
    return {node_id: sorted(urls) for node_id, urls in sorted(assigned.items())}
