"""What ``bridge.log()`` and ``bridge.step()`` accept from the trainer: integer steps, and numbers under its own keys.

- A step is an integer (``int``, a numpy or torch integer scalar: anything with ``__index__`` but ``bool``) of at most
  :data:`MAX_STEP` in magnitude, the largest every tracker stores exactly (a float's 53-bit mantissa); anything else
  raises :class:`~otel_bridge.errors.InvalidStepError` at the call, before the bridge records anything.
- A value is anything that converts to one finite float: ``int``, ``float``, numpy and torch scalars and one-element
  tensors (``.item()``). Anything else (a tensor of several elements or none, a meta-device tensor, ``10**400``, an
  object whose ``__float__`` raises) is left out with one rate-limited WARNING naming the key, and counted in
  ``otel_bridge/skipped_values``; the rest of the dict is recorded.
- A key in the bridge's own namespace (``otel_bridge`` or ``otel_bridge/...``: its health keys and wandb's step axis
  ``otel_bridge/step``), in the record or as a tracker renames it (wandb's ``_otel_bridge/x`` is ``otel_bridge/x``),
  raises :class:`~otel_bridge.errors.ReservedKeyError` at the call: a tracker would otherwise reject every record, or
  the trainer's value would overwrite the bridge's.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Mapping
from typing import Any, Final

from otel_bridge.errors import InvalidStepError, ReservedKeyError
from otel_bridge.exporters.naming import MLFLOW_KEYS, TRACKIO_KEYS, WANDB_KEYS, trainer_key
from otel_bridge.health import NONFINITE_VALUES, SKIPPED_VALUES, Health
from otel_bridge.ratelimit import RateLimitedLogger

MAX_STEP: Final = 2**53
"""The largest step magnitude: every integer up to it is exactly a float (wandb, TensorBoard and MLflow keep floats)."""

RESERVED_NAMESPACE: Final = "otel_bridge"
"""The first key segment of the bridge's own keys (health keys, wandb's step axis ``otel_bridge/step``)."""


def check_step(step: object, call: str = "log") -> int:
    """``step`` as an ``int``, or :class:`InvalidStepError` naming what was given and what is allowed."""
    if isinstance(step, bool):
        raise InvalidStepError(f"{call}(step={step!r}): a step is an integer training step, not a bool")
    try:
        value = operator.index(step)  # type: ignore[arg-type]  # ints, numpy/torch integer scalars; never a float
    except Exception:  # noqa: BLE001 - any failure means 'not an integer'; the type is named below
        raise InvalidStepError(
            f"{call}(step=...): a step must be an integer, got a {type(step).__name__}"
            + (f" ({step!r}); pass int(step) if it is a whole number" if isinstance(step, float) else "")
        ) from None
    if abs(value) > MAX_STEP:
        raise InvalidStepError(
            f"{call}(step={value}): steps above 2**53 = {MAX_STEP} cannot be stored exactly by the trackers "
            "(they keep steps as floats); number steps from 0"
        )
    return value


@functools.lru_cache(maxsize=4096)  # a trainer logs the same keys every step: name each once, not per call
def _is_reserved(key: str) -> bool:
    named = trainer_key(key)
    # in the record, or in a tracker that renames it (wandb drops a leading '_')
    names = {named, *(rule.rename(named) for rule in (WANDB_KEYS, TRACKIO_KEYS, MLFLOW_KEYS))}
    return any(name == RESERVED_NAMESPACE or name.startswith(RESERVED_NAMESPACE + "/") for name in names)


def check_keys(metrics: Mapping[Any, Any]) -> None:
    """:class:`ReservedKeyError` when a key of ``metrics`` is in the bridge's own namespace (see the module)."""
    for key in metrics:
        if _is_reserved(str(key)):
            named = trainer_key(str(key)).lstrip("_")
            raise ReservedKeyError(
                f"log(): the trainer metric {str(key)[:200]!r} is named in otel-bridge's own namespace "
                f"'{RESERVED_NAMESPACE}/' (its health keys and wandb's step axis '{RESERVED_NAMESPACE}/step'); "
                f"rename it, e.g. 'trainer/{named}'; nothing of this call was recorded"
            )


def trainer_numbers(metrics: Mapping[Any, Any], step: int, warn: RateLimitedLogger, health: Health) -> dict[str, float]:
    """The finite numbers of ``metrics`` as ``{key: float}``; every other value is skipped (see the module)."""
    values: dict[str, float] = {}
    for key, raw in metrics.items():
        name = str(key)
        try:
            item = getattr(raw, "item", None)
            value = float(item() if callable(item) else raw)
        except Exception as exc:  # noqa: BLE001 - a tensor, an overflow, a broken __float__: this key only
            health.count(SKIPPED_VALUES)
            warn.warning(
                f"not-a-number:{name}",
                "step %d: trainer metric %r is a %s, not a number (%s); it is not logged",
                step,
                name,
                type(raw).__name__,
                type(exc).__name__,
            )
            continue
        if not math.isfinite(value):
            health.count(NONFINITE_VALUES)
            warn.warning(f"nonfinite:{name}", "step %d: trainer metric %r is %s; it is not logged", step, name, value)
            continue
        values[name] = value
    return values
