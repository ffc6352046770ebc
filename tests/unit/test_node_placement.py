"""Which node's agent reads which scrape target (scrape.readers: node_agents), from ray.nodes() answers."""

from __future__ import annotations

from typing import Any

from otel_bridge.producers.scrape._internal.placement import assign_targets


def node(node_id: str, address: str, *, alive: bool = True, name: str | None = None) -> dict[str, Any]:
    return {"NodeID": node_id, "NodeManagerAddress": address, "NodeName": name or address, "Alive": alive}


def test_a_target_is_read_on_the_node_at_its_address() -> None:
    nodes = [node("a", "10.0.0.1"), node("b", "10.0.0.2"), node("c", "10.0.0.3", alive=False)]
    targets = ["http://10.0.0.2:8000/metrics", "http://10.0.0.1:8000/metrics", "http://10.0.0.3:8000/metrics"]
    assert assign_targets(targets, nodes, "a") == {
        "a": ["http://10.0.0.1:8000/metrics", "http://10.0.0.3:8000/metrics"],  # its node is gone: the trainer's
        "b": ["http://10.0.0.2:8000/metrics"],
    }


def test_loopback_targets_are_the_trainers_machine_shared_by_its_nodes_stably() -> None:
    """Several raylets on one machine (a test cluster): each loopback target goes to one of them, the same one while
    it lives; a node that leaves moves only its own targets."""
    nodes = [node(n, "10.0.0.9") for n in ("a", "b", "c")] + [node("d", "10.0.0.8")]
    targets = [f"http://127.0.0.1:{port}/metrics" for port in range(8000, 8012)]
    assigned = assign_targets(targets, nodes, "a")
    assert set(assigned) <= {"a", "b", "c"}
    assert sorted(t for urls in assigned.values() for t in urls) == sorted(targets)
    assert len(assigned) == 3  # twelve targets spread over the three nodes of that machine
    without_b = assign_targets(targets, [n for n in nodes if n["NodeID"] != "b"], "a")
    for node_id in ("a", "c"):
        assert set(assigned[node_id]) <= set(without_b[node_id])
    assert sorted(without_b["a"] + without_b["c"]) == sorted(targets)


def test_a_target_by_host_name() -> None:
    nodes = [node("a", "10.0.0.1", name="gpu-1"), node("b", "10.0.0.2", name="gpu-2")]
    assert assign_targets(["http://gpu-2:8000/metrics"], nodes, "a") == {"b": ["http://gpu-2:8000/metrics"]}
