"""Thin adapters that put a training framework's metrics and step boundaries into a :class:`~otel_bridge.Bridge`.

Each adapter lives in its own module and imports its framework only there, so ``import otel_bridge`` (and this
package) never pulls in torch, transformers or lightning:

- :mod:`otel_bridge.integrations.verl`: ``Tracking``, a drop-in for verl's ``verl.utils.tracking.Tracking``
  (same constructor, ``log(data, step)``, backend names), plus :func:`~otel_bridge.integrations.verl.patch_verl`.
- :mod:`otel_bridge.integrations.huggingface`: ``OtelBridgeCallback``, a ``transformers.TrainerCallback``
  (``pip install 'otel-bridge[huggingface]'``).
- :mod:`otel_bridge.integrations.lightning`: ``OtelBridgeLogger``, a ``lightning.pytorch.loggers.Logger``
  (``pip install 'otel-bridge[lightning]'``).

**Windows and records.** Where the framework has hooks at the start and end of a step (Hugging Face's
``on_step_begin`` / ``on_step_end``), the adapter marks the window with :meth:`Bridge.begin_step
<otel_bridge.Bridge.begin_step>` / :meth:`Bridge.end_step <otel_bridge.Bridge.end_step>`: the window is the step
itself. Where it only hands over metrics (verl's ``log(data, step)``, a Lightning ``Logger``), the first
:meth:`Bridge.log <otel_bridge.Bridge.log>` for a step is its boundary: the window runs from the previous boundary to
that call, and the first such record of a run has no window start (gauges only; see the README). Either way a step's
record stays open after its window ends: values the framework logs later *for the same step* (evaluation, epoch
metrics, the closing summary) join it, until the next step begins or the run ends. Values for a step whose record was
already sent cannot join it: the adapters leave them out with a rate-limited WARNING and count them in the
``otel_bridge/late_values`` health key (:data:`LATE_VALUES`) of the following records, so nothing disappears silently.

Multi-rank runs: only the process whose rank is ``delivery.rank`` (rank from ``otel.rank``, else ``$RANK``, else 0)
writes records to the trackers and queries the infrastructure. On the other ranks a Bridge keeps no trackers and no
producers; the adapters skip their calls there (each module says how it knows the rank). The trainer's OpenTelemetry
instruments of every rank can still be exported with ``otel.prometheus`` (a ``/metrics`` endpoint per rank, which
Prometheus scrapes and aggregates) or ``otel.otlp`` (pushed to an OpenTelemetry Collector), with the resource
attribute ``otel_bridge.rank`` telling the ranks apart.

This package also holds what the adapters share: :func:`save_hyperparameters` (``<run dir>/hparams.json``),
:func:`numeric_items` (a framework's log dict reduced to its numbers) and :func:`count_late_values`.
"""

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

LATE_VALUES: Final = "otel_bridge/late_values"
"""Health counter (cumulative, in every record once non-zero): values an adapter left out because the framework logged
them for a step whose record had already been sent."""

__all__ = ["HPARAMS_FILE", "LATE_VALUES", "count_late_values", "numeric_items", "plain", "save_hyperparameters"]


def count_late_values(bridge: Bridge, count: int) -> None:
    """Add ``count`` values left out for a closed step to the bridge's :data:`LATE_VALUES` health counter."""
    if count:
        bridge.health.count(LATE_VALUES, float(count))


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


def numeric_items(metrics: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Split a framework's log dict into its numbers and the keys of everything else.

    Numbers are ints, floats, and scalar objects with ``.item()`` (numpy, torch); booleans and strings are not
    numbers. The values are returned unchanged (the Bridge converts them and leaves out non-finite ones).
    """
    kept: dict[str, Any] = {}
    skipped: list[str] = []
    for key, value in metrics.items():
        if isinstance(value, bool | str | bytes):
            skipped.append(str(key))
        elif isinstance(value, numbers.Real) or (callable(getattr(value, "item", None)) and _is_scalar(value)):
            kept[str(key)] = value
        else:
            skipped.append(str(key))
    return kept, skipped


def _is_scalar(value: Any) -> bool:
    """Whether an object with ``.item()`` holds exactly one element (a numpy/torch scalar or 1-element tensor)."""
    size = getattr(value, "size", None)
    if callable(size):  # torch.Tensor.size() is a method; numel() counts elements
        numel = getattr(value, "numel", None)
        return callable(numel) and numel() == 1
    return size is None or size == 1
