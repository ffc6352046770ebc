"""verl's own ``marked_timer(name, timing_raw)`` blocks as otel-bridge phases, with no change to the trainer's code.

verl times each part of a PPO step with ``with marked_timer("gen", timing_raw): ...`` (``verl.utils.profiler``, imported
by ``verl/trainer/ppo/ray_trainer.py``, and through ``verl.utils.debug`` by the asynchronous trainers) and logs the
times as ``timing_s/<name>``. :func:`patch_phases` (called by :func:`~otel_bridge.integrations.verl.patch_verl`) wraps
that function: a block that :func:`phase_name` names is also a phase of the step (``phase/<phase>/...`` keys and a
child span of the step's trace, see the README), while verl's own timing is kept as it was. Blocks with other names,
and blocks nested inside a phase (verl's ``step`` block around everything, ``gen_max`` inside ``gen``), are left alone:
phases are sequential.

A block's phase is named by what the trainer does in it, which is not always verl's name for it: in the asynchronous
trainers (``verl.experimental.fully_async_policy``, ``verl.experimental.one_step_off_policy``) ``gen`` is the trainer
waiting for samples the rollout servers generated meanwhile, so it is the phase ``wait_for_rollouts`` there (and
``gen`` stays "generating", as in the synchronous trainers); the fully asynchronous trainer's weight sync,
``timing_s/param_sync``, is the phase ``update_weights``, the name the other trainers' weight sync has.

The wrapper replaces ``marked_timer`` in ``verl.utils.profiler`` (and the module defining it), so code importing it
later gets the wrapper, and in every module already imported that bound verl's function by name (as ``ray_trainer``
does at import time). The phases go to the bridge of the latest ``Tracking`` that ``patch_verl`` made verl build.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Final

from otel_bridge.bridge import Bridge
from otel_bridge.errors import BridgeClosedError

VERL_PHASES: Final = frozenset(
    {
        "gen",
        "reward",
        "old_log_prob",
        "ref",
        "values",
        "adv",
        "update_critic",
        "update_actor",
        "update_weights",
        "testing",
        "wait_for_enough_samples",
    }
)
"""The names of verl's ``marked_timer`` blocks that become phases under their own name (the parts of a PPO step)."""

WAIT_FOR_ROLLOUTS: Final = "wait_for_rollouts"
"""The phase of an asynchronous trainer's ``gen`` block: waiting for samples from the rollout side."""

ASYNC_TRAINER_MODULES: Final = ("verl.experimental.fully_async_policy.", "verl.experimental.one_step_off_policy.")
"""The packages of verl's asynchronous trainers, whose ``gen`` block waits for rollouts instead of generating."""

RENAMED_PHASES: Final[Mapping[str, str]] = {
    "timing_s/param_sync": "update_weights",  # FullyAsyncTrainer._fit_update_weights: the weight sync
}
"""verl block name -> phase, for blocks that are phases under another name (in every trainer)."""

PROFILER_MODULE: Final = "verl.utils.profiler"


def phase_name(block: str, module: str) -> str | None:
    """The phase of verl's ``marked_timer(block, ...)`` block written in module ``module``, or ``None`` when the block
    is not a phase (see the module docstring)."""
    if block == "gen" and module.startswith(ASYNC_TRAINER_MODULES):
        return WAIT_FOR_ROLLOUTS
    if block in VERL_PHASES:
        return block
    return RENAMED_PHASES.get(block)


def patch_phases(tracking_module: Any) -> Callable[[], None]:
    """Make ``tracking_module.Tracking`` (otel-bridge's, set by ``patch_verl``) remember its bridge and verl's
    ``marked_timer`` mark phases on it. Returns a function that undoes both. Does nothing (returns a no-op) when
    ``verl.utils.profiler`` cannot be imported."""
    try:
        profiler = importlib.import_module(PROFILER_MODULE)
    except ImportError:
        return lambda: None
    original: Callable[..., Any] = profiler.marked_timer
    base = tracking_module.Tracking
    current: list[Bridge] = []

    class _Tracking(base):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            current[:] = [self.bridge]

    _Tracking.__name__ = _Tracking.__qualname__ = "Tracking"

    @contextmanager
    def timed(name: str, phase: str | None, timing_raw: dict[str, float], *args: Any, **kwargs: Any) -> Iterator[None]:
        bridge = current[0] if current else None
        if bridge is None or phase is None or bridge.current_phase is not None:
            with original(name, timing_raw, *args, **kwargs):
                yield
            return
        with original(name, timing_raw, *args, **kwargs):
            try:
                bridge.begin_phase(phase)
            except BridgeClosedError:  # verl goes on after finish(): its timing only
                yield
                return
            try:
                yield
            finally:
                bridge.end_phase(phase)

    def marked_timer(
        name: str, timing_raw: dict[str, float], *args: Any, **kwargs: Any
    ) -> AbstractContextManager[None]:
        caller = sys._getframe(1).f_globals.get("__name__", "")  # the module whose code times the block
        return timed(name, phase_name(name, caller), timing_raw, *args, **kwargs)

    # The module's own namespace, never getattr: lazy modules (transformers) import on attribute access.
    bound = [m for m in list(sys.modules.values()) if getattr(m, "__dict__", {}).get("marked_timer") is original]
    for module in bound:
        setattr(module, "marked_timer", marked_timer)  # noqa: B010 - a module attribute mypy does not know
    tracking_module.Tracking = _Tracking

    def restore() -> None:
        tracking_module.Tracking = base
        for module in bound:
            if module.__dict__.get("marked_timer") is marked_timer:
                setattr(module, "marked_timer", original)  # noqa: B010

    return restore
