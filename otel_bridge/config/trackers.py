"""Which tracker ``type`` values a configuration may name: the built-in trackers and those installed packages declare
(entry points of :data:`ENTRY_POINT_GROUP`), known here so the configuration check reports a misspelt tracker beside
every other problem of the file, in one run. Nothing is imported: a plugin is loaded only when its tracker is built
(:mod:`otel_bridge.exporters.backends.registry`)."""

from __future__ import annotations

import difflib
import importlib.metadata
from typing import Final

ENTRY_POINT_GROUP: Final = "otel_bridge.backends"
"""The entry-point group in which installed packages declare extra tracker kinds."""

BUILTIN_TRACKERS: Final = ("jsonl", "tensorboard", "console", "wandb", "mlflow", "trackio")
"""The trackers that ship with otel-bridge (each with its factory in the backends registry)."""


def plugin_tracker_types() -> set[str]:
    """The tracker types installed packages declare (entry point names); nothing is imported."""
    return {entry_point.name for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


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
