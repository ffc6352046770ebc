"""Where the peers built by ``peers/build.sh`` live, and a failure naming the make target when one is missing.

The peers are servers built from their Go modules, and vLLM's CPU build installed from PyPI into its own Python
environment, into a cache outside the clone (``make peers``):
``$OTEL_BRIDGE_PEERS``, else ``$XDG_CACHE_HOME/otel-bridge/peers``, else ``~/.cache/otel-bridge/peers``, one folder
per peer (``NAME-VERSION``) holding its binaries and a ``.recipe`` written last, so a folder with a recipe is a
complete build. Debian's Prometheus 2.42 is not one of them: it is the ``prometheus`` on PATH
(:func:`tests.helpers.prometheus_server.prometheus_binary`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.machine_cache import machine_cache

__all__ = [
    "OTELCOL",
    "PEERS",
    "PROMETHEUS3",
    "UNAVAILABLE_COMPONENTS",
    "VICTORIAMETRICS",
    "VLLM",
    "Peer",
    "peer_binary",
    "peers_root",
]


@dataclass(frozen=True)
class Peer:
    """One peer of ``peers/build.sh``: its name there, its cache folder and its make target."""

    name: str  # peers/build.sh NAME
    folder: str  # NAME-VERSION under the cache root
    target: str  # the make target that builds it
    version: str  # the version it reports


PROMETHEUS3 = Peer("prometheus3", "prometheus-3.16.0", "peer-prometheus3", "3.16.0")
OTELCOL = Peer("otelcol", "otelcol-otel-bridge-0.165.1", "peer-otelcol", "0.165.1")
VICTORIAMETRICS = Peer("victoriametrics", "victoria-metrics-1.151.0", "peer-victoriametrics", "v1.151.0")
VLLM = Peer("vllm", "vllm-0.32.0", "peer-vllm", "0.32.0")  # its binary: venv/bin/python (tests/helpers/vllm_server.py)
PEERS = (PROMETHEUS3, OTELCOL, VICTORIAMETRICS, VLLM)

#: Components of collector/otelcol.yaml that the otelcol peer lacks, by type: the Go module proxy here cannot serve
#: their modules' dependencies at the pinned release (peers/build.sh, OTELCOL_UNAVAILABLE, says what it answered). The
#: tests that run the collector leave out these and nothing else.
UNAVAILABLE_COMPONENTS = {"processors": ("k8s_attributes",)}
#: Their Go modules, as collector/manifest.yaml lists them (without the version).
UNAVAILABLE_MODULES = ("github.com/open-telemetry/opentelemetry-collector-contrib/processor/k8sattributesprocessor",)


def peers_root() -> Path:
    """The cache folder of all peers, as ``peers/build.sh`` computes it."""
    explicit = os.environ.get("OTEL_BRIDGE_PEERS")
    if explicit:
        return Path(explicit)
    return machine_cache() / "peers"


def peer_binary(peer: Peer, binary: str) -> Path:
    """The path of ``binary`` in ``peer``'s build; fails the calling test, naming the make target, when it is not
    built."""
    folder = peers_root() / peer.folder
    path = folder / binary
    if not (folder / ".recipe").is_file() or not path.is_file():
        pytest.fail(
            f"{binary} of the peer {peer.name} is not built (looked for {path}): run `make {peer.target}` (or `make "
            "peers`; `make test` builds them), which builds it into that cache (peers/build.sh); "
            "OTEL_BRIDGE_PEERS moves the cache",
            pytrace=False,
        )
    return path
