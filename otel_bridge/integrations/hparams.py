"""Hyperparameters beside the records: trackers receive one record of numbers per step, so an adapter writes the
framework's configuration to ``<run dir>/hparams.json`` (:func:`save_hyperparameters`), made JSON-ready by
:func:`plain`."""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import math
import numbers
import os
from argparse import Namespace
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from otel_bridge.bridge import Bridge
from otel_bridge.errors import BackendError

_log = logging.getLogger(__name__)

HPARAMS_FILE: Final = "hparams.json"
"""File in the run directory that :func:`save_hyperparameters` writes (trackers receive metrics only)."""


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data: mappings (also OmegaConf ``DictConfig``), sequences, dataclasses,
    ``argparse.Namespace``, paths and enums are converted; numbers, strings, booleans and ``None`` stay; anything
    else becomes its ``str()``. Non-finite floats become strings (JSON has no NaN)."""
    if value is None or isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain(dataclasses.asdict(value))
    if isinstance(value, Namespace):
        return plain(vars(value))
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, enum.Enum):
        return plain(value.value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, Sequence | set | frozenset) and not isinstance(value, bytes | bytearray):
        return [plain(item) for item in value]
    if isinstance(value, numbers.Real):
        return plain(float(value))
    return str(value)


def save_hyperparameters(bridge: Bridge, params: Mapping[str, Any] | Namespace | Any) -> Path | None:
    """Merge ``params`` into ``<run dir>/hparams.json`` and return its path.

    Trackers receive one record of numbers per step, so hyperparameters are kept beside them in the run directory
    (later calls add and overwrite top-level keys). Only the delivering rank writes; elsewhere this returns ``None``.
    Raises :class:`~otel_bridge.errors.BackendError` when the file cannot be written.
    """
    if not bridge.delivers:
        return None
    converted = plain(params)
    if not isinstance(converted, dict):
        converted = {"params": converted}
    path = bridge.run_dir / HPARAMS_FILE
    try:
        existing: dict[str, Any] = {}
        if path.exists():
            loaded = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(loaded, dict):
                existing = loaded
        existing.update(converted)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(existing, indent=2, sort_keys=True, allow_nan=False) + "\n", encoding="utf-8")
    except (OSError, ValueError) as err:
        raise BackendError(f"cannot write hyperparameters to {path}: {err}; choose a writable run.dir") from err
    _log.debug("otel-bridge: hyperparameters written to %s", path)
    return path
