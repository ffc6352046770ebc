"""A run's own directory: ``<run.dir>/<run.name>``, or ``<run.name>-2``, ``-3``, ... when an earlier run already wrote
there, so that a run never appends to another run's files (the way wandb and MLflow give every run an id of its own),
unless it says it continues that run (``run.resume``).

Without ``run.name`` a run is named ``otel-bridge-<UTC time>`` (:data:`DEFAULT_RUN_PREFIX`); the runs of a config are
those named after its ``run.name`` (or the default), re-runs included (:func:`runs_of`).
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from otel_bridge.config import RunConfig

DEFAULT_RUN_PREFIX: Final = "otel-bridge-"
"""How the name of a run without ``run.name`` begins (then its UTC start time, ``%Y%m%d-%H%M%S``)."""

_log = logging.getLogger(__name__)


def default_run_name(now: datetime | None = None) -> str:
    """The name of a run whose config sets no ``run.name``: ``otel-bridge-<UTC time>``."""
    return (now or datetime.now(UTC)).strftime(f"{DEFAULT_RUN_PREFIX}%Y%m%d-%H%M%S")


def _holds_a_run(path: Path) -> bool:
    """Whether ``path`` is taken: a file, or a directory with something in it (an empty one is free to use)."""
    if not path.exists():
        return False
    if not path.is_dir():
        return True
    return any(path.iterdir())


def own_run_dir(run: RunConfig, now: datetime | None = None) -> Path:
    """The directory of a new run of ``run``: ``<run.dir>/<name>``, else, when an earlier run wrote there, the first
    free ``<name>-N`` (N = 2, 3, ...), with a WARNING naming both; with ``run.resume``, ``<run.dir>/<name>`` as it is
    (the run it continues). Nothing is created."""
    name = run.name or default_run_name(now)
    first = run.dir / name
    if run.resume:
        return first
    candidate, number = first, 1
    while _holds_a_run(candidate):
        number += 1
        candidate = run.dir / f"{name}-{number}"
    if candidate != first:
        _log.warning(
            "otel-bridge: %s holds an earlier run; this run writes to %s instead (a run never appends to another "
            "run's files or tracker runs); set run.name to name runs apart",
            first,
            candidate,
        )
    return candidate


def runs_of(run: RunConfig) -> list[Path]:
    """The run directories under ``run.dir`` that runs of ``run`` made: ``<run.name>`` and its re-runs
    ``<run.name>-N``, or, without ``run.name``, the runs named by default (``otel-bridge-<time>[-N]``); oldest first
    (by modification time)."""
    if not run.dir.is_dir():
        return []
    if run.name is not None:
        pattern = re.compile(re.escape(run.name) + r"(-[0-9]+)?")
    else:
        pattern = re.compile(re.escape(DEFAULT_RUN_PREFIX) + r"[0-9]{8}-[0-9]{6}(-[0-9]+)?")
    found = [path for path in run.dir.iterdir() if path.is_dir() and pattern.fullmatch(path.name)]
    return sorted(found, key=lambda path: path.stat().st_mtime)
