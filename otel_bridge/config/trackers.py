"""Which tracker ``type`` values a configuration may name: the built-in trackers and those installed packages declare
(entry points of :data:`ENTRY_POINT_GROUP`), known here so the configuration check reports a misspelt tracker beside
every other problem of the file, in one run. Nothing is imported: a plugin is loaded only when its tracker is built
(:mod:`otel_bridge.exporters.backends.registry`)."""

from __future__ import annotations

import difflib
import importlib.metadata
import os
import sys
import threading
from typing import Final

ENTRY_POINT_GROUP: Final = "otel_bridge.backends"
"""The entry-point group in which installed packages declare extra tracker kinds."""

BUILTIN_TRACKERS: Final = ("jsonl", "tensorboard", "console", "wandb", "mlflow", "trackio")
"""The trackers that ship with otel-bridge (each with its factory in the backends registry)."""


_PathState = tuple[tuple[str, int], ...]
_scanned: tuple[_PathState, tuple[importlib.metadata.EntryPoint, ...]] | None = None
_scan_lock = threading.Lock()


def _path_state() -> _PathState:
    """What decides the installed distributions: each ``sys.path`` entry and its directory's modification time (an
    install or uninstall adds or removes a ``.dist-info`` directory there, which changes it)."""
    state: list[tuple[str, int]] = []
    for entry in sys.path:
        try:
            state.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            state.append((entry, -1))
    return tuple(state)


def declared_entry_points() -> tuple[importlib.metadata.EntryPoint, ...]:
    """The entry points of :data:`ENTRY_POINT_GROUP` installed packages declare; nothing is imported.

    Finding them reads every installed distribution's metadata (tens of milliseconds in an environment with torch
    and ray), so the answer is kept until ``sys.path`` or one of its directories changes (the same test
    ``importlib.metadata`` applies to its own path cache).
    """
    global _scanned
    state = _path_state()
    with _scan_lock:
        if _scanned is None or _scanned[0] != state:
            _scanned = (state, tuple(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)))
        return _scanned[1]


def plugin_tracker_types() -> set[str]:
    """The tracker types installed packages declare (entry point names); nothing is imported."""
    return {entry_point.name for entry_point in declared_entry_points()}


def unknown_tracker_message(kind: str, plugins: set[str]) -> str:
    """Why ``kind`` is not a tracker, with the closest known one and where the others come from."""
    installed = sorted(plugins - set(BUILTIN_TRACKERS))
    close = difflib.get_close_matches(kind, [*BUILTIN_TRACKERS, *installed], n=1, cutoff=0.6)
    did_you_mean = f"; did you mean {close[0]!r}?" if close else ""
    return (
        f"unknown tracker {kind!r}{did_you_mean}; the built-in trackers are: {', '.join(sorted(BUILTIN_TRACKERS))}; "
        f"installed plugin trackers: {', '.join(installed) if installed else 'none'} (a package adds one with an "
        f"entry point in the group {ENTRY_POINT_GROUP!r}; see docs/backends.md)"
    )
