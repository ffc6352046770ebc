"""What a framework logs, as the bridge takes it: the numbers of its log dict (:func:`numeric_items`), and the values it
logged for a step whose record was already sent, counted in :data:`LATE_VALUES` (:func:`count_late_values`)."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any, Final

from otel_bridge.bridge import Bridge

LATE_VALUES: Final = "otel_bridge/late_values"
"""Health counter (cumulative, in every record once non-zero): values an adapter left out because the framework logged
them for a step whose record had already been sent."""


def count_late_values(bridge: Bridge, count: int) -> None:
    """Add ``count`` values left out for a closed step to the bridge's :data:`LATE_VALUES` health counter."""
    if count:
        bridge.health.count(LATE_VALUES, float(count))


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
