"""otel-bridge's cache folder on this machine, shared by every clone (the peers, mypy's cache, the tests' MLflow
store). A module of its own: the tiers' rule counts a module holding anything of :mod:`tests.helpers.peers` as one that
needs a server, and a helper that only keeps files here starts none."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["machine_cache"]


def machine_cache() -> Path:
    """``$XDG_CACHE_HOME/otel-bridge``, else ``~/.cache/otel-bridge`` (the Makefile and ``peers/build.sh`` compute the
    same folder)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "otel-bridge"
