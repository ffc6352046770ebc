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
from otel_bridge.errors import BackendError, ConfigError

_log = logging.getLogger(__name__)

HPARAMS_FILE: Final = "hparams.json"
"""File in the run directory that :func:`save_hyperparameters` writes (trackers receive metrics only)."""


MAX_DEPTH: Final = 100
"""The deepest nesting of lists and mappings :func:`plain` converts (a real configuration nests a few levels)."""


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data: mappings (also OmegaConf ``DictConfig``), sequences, dataclasses,
    ``argparse.Namespace``, paths and enums are converted; numbers, strings, booleans and ``None`` stay; anything
    else becomes its ``str()``. Non-finite floats become strings (JSON has no NaN).

    A value that holds itself (a mapping inside itself) or nests deeper than :data:`MAX_DEPTH` levels is a
    :class:`ConfigError` naming the key where it does, in bounded time and stack."""
    return _plain(value, (), frozenset())


def _plain(value: Any, path: tuple[str, ...], holding: frozenset[int]) -> Any:
    if value is None or isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, enum.Enum):
        return _plain(value.value, path, holding)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    where = ".".join(path) or "the top"
    if id(value) in holding:
        raise ConfigError(
            f"the hyperparameters (config) hold themselves at {_bounded(where)}: pass a tree, not a cycle"
        )
    if len(path) >= MAX_DEPTH:
        raise ConfigError(
            f"the hyperparameters (config) nest deeper than {MAX_DEPTH} levels at {_bounded(where)}: flatten them"
        )
    inside = holding | {id(value)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        items: Any = {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
        return {key: _plain(item, (*path, key), inside) for key, item in items.items()}
    if isinstance(value, Namespace):
        value = vars(value)
    if isinstance(value, Mapping):
        return {str(key): _plain(item, (*path, str(key)), inside) for key, item in value.items()}
    if isinstance(value, Sequence | set | frozenset) and not isinstance(value, bytes | bytearray):
        return [_plain(item, (*path, str(index)), inside) for index, item in enumerate(value)]
    if isinstance(value, numbers.Real):
        return _plain(float(value), path, holding)
    return str(value)


def _bounded(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


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
