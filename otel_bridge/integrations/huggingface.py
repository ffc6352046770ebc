"""A Hugging Face ``transformers.TrainerCallback``: one otel-bridge record per optimizer step.

::

    from otel_bridge import Bridge
    from otel_bridge.integrations.huggingface import OtelBridgeCallback

    with Bridge.from_config("otel-bridge.yaml") as bridge:
        trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[OtelBridgeCallback(bridge)])
        trainer.train()

Needs ``pip install 'otel-bridge[huggingface]'`` (transformers with torch and accelerate); importing this module
without transformers raises :class:`~otel_bridge.errors.ConfigError`.

**Records.** The record of step ``g`` (``state.global_step`` after the optimizer step) holds every number the
Trainer logs for ``g`` (``on_log``: loss, grad_norm, learning_rate, eval metrics, the final train_runtime, ...) and
the infrastructure's statistics over the step's window. Keys are renamed as the Trainer's wandb/TensorBoard
integrations do (``loss`` -> ``train/loss``, ``eval_loss`` -> ``eval/loss``, ``test_x`` -> ``test/x``) unless
``rewrite_keys=False``. Values that are not numbers are skipped.

**Windows.** A ``with bridge.step()`` block cannot span callbacks, and the Trainer calls ``on_log`` for step ``g``
*after* ``on_step_end``, so the callback delivers step ``g``'s record with :meth:`Bridge.log <otel_bridge.Bridge.log>`
at the next ``on_step_begin`` (or at ``on_train_end``). The window of step ``g`` therefore runs from
``on_step_begin`` of step ``g`` to ``on_step_begin`` of step ``g + 1``: the step itself plus its logging, evaluation
and checkpointing, and the loading of the next batch. ``on_train_begin`` opens a record for the starting
``global_step`` (0 for a new run; it also receives ``eval_on_start`` metrics), which ends at the first
``on_step_begin``: it carries the servers' gauges before training and gives step 1 a complete window
(``record_train_start=False`` leaves it out; step 1 then has no window start). :meth:`OtelBridgeCallback.flush`
delivers a pending record by hand (e.g. after a stand-alone ``trainer.evaluate()``).

**Multi-rank.** Only the process with ``state.is_world_process_zero`` calls the bridge; the others do nothing here
(their Bridge, if ``$RANK`` is not ``delivery.rank``, writes to no tracker anyway; their OpenTelemetry instruments can
still be exported with ``otel.prometheus`` / ``otel.otlp``).

**Errors.** The callback never stops training: a record that cannot be delivered (a closed bridge, a step that is
not after the bridge's last one, e.g. when one bridge is reused for a second ``Trainer``) is logged at WARNING and
left out. The bridge belongs to the caller, who closes it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from otel_bridge.bridge import Bridge
from otel_bridge.errors import BridgeClosedError, ConfigError, StepOrderError
from otel_bridge.integrations import numeric_items, save_hyperparameters
from otel_bridge.ratelimit import RateLimitedLogger

try:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
except ImportError as _err:  # pragma: no cover - exercised only without the extra
    raise ConfigError(
        f"otel_bridge.integrations.huggingface needs transformers ({_err}); pip install 'otel-bridge[huggingface]'"
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
        self._pending: int | None = None
        self._values: dict[str, Any] = {}
        self._last: int | None = None

    @property
    def pending_step(self) -> int | None:
        """The step whose record is open (delivered at the next step's start), or ``None``."""
        return self._pending

    # -- the record being assembled ------------------------------------------------------------------------------

    def _open(self, step: int) -> bool:
        """Make ``step`` the pending record (delivering an earlier one); ``False`` when it was already delivered."""
        if self._pending == step:
            return True
        if self._pending is not None and self._pending > step:
            self._warn.warning(
                "step-backwards",
                "otel-bridge: the Trainer is at step %d but step %d is open; its values are left out",
                step,
                self._pending,
            )
            return False
        self.flush()
        if self._last is not None and step <= self._last:
            self._warn.warning(
                f"late:{step}",
                "otel-bridge: the Trainer logged values for step %d after its record was delivered; they are left out",
                step,
            )
            return False
        self._pending, self._values = step, {}
        return True

    def flush(self) -> None:
        """Deliver the pending record now (its window ends now). Does nothing when no record is open."""
        if self._pending is None:
            return
        step, values = self._pending, self._values
        self._pending, self._values = None, {}
        self._last = step
        try:
            self.bridge.log(values, step=step)
        except (StepOrderError, BridgeClosedError) as err:
            self._warn.warning(f"deliver:{type(err).__name__}", "otel-bridge: step %d is not recorded: %s", step, err)

    # -- TrainerCallback events ----------------------------------------------------------------------------------

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Write the training arguments and open the record of the starting step."""
        if not state.is_world_process_zero:
            return
        if self.save_training_args:
            try:
                save_hyperparameters(self.bridge, args.to_dict())  # type: ignore[no-untyped-call, unused-ignore]
            except Exception as err:  # noqa: BLE001 - hyperparameters must not stop training
                self._warn.warning("hparams", "otel-bridge: training arguments not saved: %s", err)
        if self.record_train_start:
            self._open(state.global_step)

    def on_step_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """The previous step's window ends: deliver its record."""
        if state.is_world_process_zero:
            self.flush()

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        """Open the record of the step just taken (``state.global_step``); ``on_log`` adds to it."""
        if state.is_world_process_zero:
            self._open(state.global_step)

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
        numbers, skipped = numeric_items(logs)
        if skipped:
            _log.debug("otel-bridge: step %d: non-numeric log values left out: %s", state.global_step, skipped)
        if numbers and self._open(state.global_step):
            self._values.update(rewrite_logs(numbers) if self.rewrite_keys else numbers)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Deliver the last record."""
        if state.is_world_process_zero:
            self.flush()
