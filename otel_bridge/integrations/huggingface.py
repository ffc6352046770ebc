"""A Hugging Face ``transformers.TrainerCallback``: one otel-bridge record per optimizer step.

::

    from otel_bridge import Bridge
    from otel_bridge.integrations.huggingface import OtelBridgeCallback

    with Bridge.from_config("otel-bridge.yaml") as bridge:
        trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[OtelBridgeCallback(bridge)])
        trainer.train()

Needs the ``huggingface`` extra (transformers with torch and accelerate); importing this module
without transformers raises :class:`~otel_bridge.errors.ConfigError`.

**Records.** The record of step ``g`` is the one the Trainer logs with ``state.global_step == g`` (the optimizer step
counter after step ``g``'s update). It holds every number the Trainer logs for ``g`` (``on_log``: loss, grad_norm,
learning_rate, eval metrics, the final train_runtime, ...) and the infrastructure's statistics over the step's
window. Keys are renamed as the Trainer's wandb/TensorBoard integrations do (``loss`` -> ``train/loss``,
``eval_loss`` -> ``eval/loss``, ``test_x`` -> ``test/x``) unless ``rewrite_keys=False``. Values that are not numbers
are skipped.

**Windows.** ``on_step_begin`` calls :meth:`Bridge.begin_step(state.global_step + 1)
<otel_bridge.Bridge.begin_step>` (the Trainer increments ``global_step`` just before ``on_step_end``) and
``on_step_end`` calls :meth:`Bridge.end_step(state.global_step) <otel_bridge.Bridge.end_step>`: the window of step
``g`` is the step itself (its forward/backward passes over every gradient-accumulation micro-batch and the optimizer
update), not the logging, evaluation and checkpointing after it nor the loading of the next batch (the Trainer fetches
a step's batches before ``on_step_begin``). The record stays open after ``on_step_end``: ``on_log`` calls
:meth:`Bridge.log(numbers, step=state.global_step) <otel_bridge.Bridge.log>`, which joins it, and the record is sent
when the next step begins or at ``on_train_end`` (also for end-of-epoch evaluation and the Trainer's closing summary,
which it logs at the last step's number). ``on_train_begin`` begins a record for the starting ``global_step`` (0 for a
new run), whose window runs to the first ``on_step_begin`` and which receives ``eval_on_start`` metrics; it carries the
servers' state before training (``record_train_start=False`` leaves it out). Values logged for a step whose record was
already sent (e.g. a stand-alone ``trainer.evaluate()`` after ``on_train_end``) are left out with a WARNING and counted
in ``otel_bridge/late_values``; values logged when no record is open for their step start a record of their own
(window: from the previous boundary to that call). :meth:`OtelBridgeCallback.flush` sends the open record by hand.

**Multi-rank.** Only the process with ``state.is_world_process_zero`` calls the bridge; the others do nothing here
(their Bridge, if ``$RANK`` is not ``delivery.rank``, writes to no tracker anyway; their OpenTelemetry instruments can
still be exported with ``otel.prometheus`` / ``otel.otlp``).

**Errors.** The callback never stops training: a step the bridge refuses (a closed bridge, a step that is not after
the bridge's last one, e.g. when one bridge is reused for a second ``Trainer`` starting at step 0) is logged at
WARNING and left out. The bridge belongs to the caller, who closes it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from otel_bridge.bridge import Bridge
from otel_bridge.errors import BridgeClosedError, ConfigError, StepOrderError, install_hint
from otel_bridge.integrations.hparams import save_hyperparameters
from otel_bridge.integrations.logged_values import LATE_VALUES, count_late_values, numeric_items
from otel_bridge.ratelimit import RateLimitedLogger

try:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
except ImportError as _err:  # pragma: no cover - exercised only without the extra
    raise ConfigError(
        f"otel_bridge.integrations.huggingface needs transformers ({_err}); {install_hint('huggingface')}"
    ) from _err

_log = logging.getLogger(__name__)

_PREFIXES: Final = (("eval_", "eval/"), ("test_", "test/"))

__all__ = ["OtelBridgeCallback", "rewrite_logs"]


def rewrite_logs(logs: Mapping[str, Any]) -> dict[str, Any]:
    """The Trainer's log keys as its tracker integrations name them: ``eval_x`` -> ``eval/x``, ``test_x`` ->
    ``test/x``, anything else ``x`` -> ``train/x``."""
    out: dict[str, Any] = {}
    for key, value in logs.items():
        for prefix, group in _PREFIXES:
            if key.startswith(prefix):
                out[group + key[len(prefix) :]] = value
                break
        else:
            out["train/" + key] = value
    return out


class OtelBridgeCallback(TrainerCallback):  # type: ignore[misc, unused-ignore]  # Any when transformers is absent
    """Deliver one record per optimizer step to ``bridge`` (see the module docstring for windows and ranks).

    Args:
        bridge: the Bridge the records go to; the caller closes it.
        rewrite_keys: rename keys as the Trainer's wandb integration does (``train/loss``, ``eval/loss``).
        record_train_start: open a record for the starting ``global_step`` at ``on_train_begin``.
        save_training_args: write ``TrainingArguments`` to ``<run dir>/hparams.json`` at ``on_train_begin``.
    """

    def __init__(
        self,
        bridge: Bridge,
        *,
        rewrite_keys: bool = True,
        record_train_start: bool = True,
        save_training_args: bool = True,
    ) -> None:
        if not isinstance(bridge, Bridge):
            raise ConfigError(
                f"OtelBridgeCallback needs a Bridge, not {type(bridge).__name__}; build one with Bridge.from_config()"
            )
        self.bridge = bridge
        self.rewrite_keys = rewrite_keys
        self.record_train_start = record_train_start
        self.save_training_args = save_training_args
        self._warn = RateLimitedLogger(_log, bridge.config.delivery.warn_interval_s)
        self._running: int | None = None

    @property
    def running_step(self) -> int | None:
        """The step whose window is running (begun by this callback and not yet ended), or ``None``."""
        return self._running

    # -- the bridge's step boundaries ----------------------------------------------------------------------------

    def _refused(self, step: int, err: StepOrderError | BridgeClosedError) -> None:
        self._warn.warning(f"refused:{type(err).__name__}", "otel-bridge: step %d is not recorded: %s", step, err)

    def _begin(self, step: int) -> None:
        """End the running window, if any, and begin the window of ``step`` (sending the previous record)."""
        self._end()
        try:
            self.bridge.begin_step(step)
        except (StepOrderError, BridgeClosedError) as err:
            self._refused(step, err)
        else:
            self._running = step

    def _end(self) -> None:
        """End the running window; its record stays open for ``on_log``."""
        if self._running is None:
            return
        step, self._running = self._running, None
        try:
            self.bridge.end_step(step)
        except (StepOrderError, BridgeClosedError) as err:
            self._refused(step, err)

    def flush(self) -> None:
        """Send the open record now (ending its window if it is still running); later values for its step are left
        out. Does nothing when no record is open."""
        self._end()
        self.bridge.commit()

    # -- TrainerCallback events ----------------------------------------------------------------------------------

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Write the training arguments and begin the record of the starting step."""
        if not state.is_world_process_zero:
            return
        if self.save_training_args:
            try:
                save_hyperparameters(self.bridge, args.to_dict())  # type: ignore[no-untyped-call, unused-ignore]
            except Exception as err:  # noqa: BLE001 - hyperparameters must not stop training
                self._warn.warning("hparams", "otel-bridge: training arguments not saved: %s", err)
        if self.record_train_start:
            self._begin(state.global_step)

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Begin the window of step ``state.global_step + 1`` (sending the previous step's record)."""
        if state.is_world_process_zero:
            self._begin(state.global_step + 1)

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        """End the window of the step just taken; its record stays open for ``on_log``."""
        if not state.is_world_process_zero:
            return
        if self._running is not None and self._running != state.global_step:
            self._warn.warning(
                "step-mismatch",
                "otel-bridge: the Trainer ended step %d but the window of step %d is running; it is recorded as %d",
                state.global_step,
                self._running,
                self._running,
            )
        self._end()

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Add the logged numbers to the record of ``state.global_step``."""
        if not state.is_world_process_zero or not logs:
            return
        step = state.global_step
        numbers, skipped = numeric_items(logs)
        if skipped:
            _log.debug("otel-bridge: step %d: non-numeric log values left out: %s", step, skipped)
        if not numbers:
            return
        values = rewrite_logs(numbers) if self.rewrite_keys else numbers
        try:
            self.bridge.log(values, step=step)
        except StepOrderError as err:
            count_late_values(self.bridge, len(values))
            self._warn.warning(
                f"late:{step}",
                "otel-bridge: the Trainer logged %s for step %d, whose record cannot take them (%s); they are left "
                "out and counted in %s",
                sorted(values),
                step,
                err,
                LATE_VALUES,
            )
        except BridgeClosedError as err:
            self._refused(step, err)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Send the last record (the bridge stays open: it belongs to the caller)."""
        if state.is_world_process_zero:
            self.flush()
