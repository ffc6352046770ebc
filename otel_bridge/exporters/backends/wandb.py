"""Weights & Biases backend: one record per training step, without ever fighting the trainer over wandb's step.

wandb numbers the rows of a run's history with its own step (``run.step``). ``run.log(data, step=n)`` with
``n`` below the run's current step is dropped by wandb (with a warning, nothing raised), and every
``run.log(data)`` without ``commit=False`` advances the step. The bridge delivers a step's record from a
worker thread *after* the step ended, possibly after the trainer already logged the next step to the same
run, so it cannot use wandb's step as its x-axis when it shares the run with the trainer.

Every record therefore carries its training step as a value, :data:`STEP_KEY` (``otel_bridge/step``), and
every key the bridge writes is declared with ``run.define_metric(key, step_metric=STEP_KEY)``: charts plot
the bridge's keys against the training step whichever wandb row holds them. Two ways of writing rows:

- ``steps: own`` (the default for a run the bridge creates): the bridge is the run's only writer and logs
  each record as its own row with ``step=record.step``, so wandb's step equals the training step. A record
  below the run's current step raises :class:`BackendError` instead of being dropped by wandb.
- ``steps: follow`` (the default when the bridge attaches to the trainer's active run): the bridge never
  passes ``step`` and never commits a row. It adds each record to the trainer's current row with
  ``commit=False``; the trainer's next ``wandb.log`` commits that row. At most one record goes into a row:
  a record that finds the row it would share with the previous record waits (in order, in memory) until the
  trainer moves wandb to a new row. At :meth:`WandbBackend.close`, records still waiting get rows of their
  own after the trainer's last row: close the bridge after the trainer's last ``wandb.log``.

The bridge finishes only a run it created. ``wandb`` is imported when a backend is created.
"""

from __future__ import annotations

import logging
import math
import re
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

from otel_bridge.errors import BackendError, ConfigError, install_hint
from otel_bridge.exporters.backends.options import (
    BackendOptions,
    NonEmptyStr,
    PathOption,
    StrList,
    StrMapping,
    parse_options,
    under,
)
from otel_bridge.exporters.naming import WANDB_KEYS
from otel_bridge.exporters.record import StepRecord

_log = logging.getLogger(__name__)

STEP_KEY: Final = "otel_bridge/step"
"""The value that carries a record's training step; every key the bridge writes is plotted against it."""

WAITING_WARN_THRESHOLD: Final = 20
"""In ``follow`` mode, a WARNING is logged once when this many records wait for the trainer's next row."""

StepsMode = Literal["own", "follow"]
WandbMode = Literal["online", "offline", "disabled", "shared"]
STEPS_MODES: Final = ("own", "follow")
WANDB_MODES: Final = ("online", "offline", "disabled", "shared")


class WandbOptions(BackendOptions):
    """Options of the ``wandb`` tracker; all but ``steps`` describe a run the bridge creates (ignored, with a
    WARNING, when it attaches to an active run)."""

    project: NonEmptyStr | None = None
    """wandb project; default $WANDB_PROJECT or wandb's default."""
    entity: NonEmptyStr | None = None
    """wandb entity (user or team); default $WANDB_ENTITY or yours."""
    name: NonEmptyStr | None = None
    """Display name; default the bridge's run name."""
    group: NonEmptyStr | None = None
    tags: StrList | None = None
    config: StrMapping | None = None
    """Stored as the run's config."""
    dir: PathOption = Path(".")
    """Directory in which wandb makes its wandb/ folder, relative to the run directory."""
    mode: WandbMode | None = None
    """Default $WANDB_MODE or online."""
    steps: StepsMode | None = None
    """own (the bridge alone writes rows, wandb's step = training step) or follow (add records to the trainer's
    rows); default own for a run the bridge creates, follow when it attaches to an active run."""


_CREATE_ONLY_OPTIONS: Final = ("project", "entity", "name", "group", "tags", "config", "dir", "mode")
_SPECIAL_METRIC_CHARS: Final = re.compile(r"([.\\*])")


def define_metric_name(key: str) -> str:
    """``key`` as ``define_metric`` expects it: wandb reads an unescaped ``.`` in a metric name as nesting
    (and ``*`` as a glob), so ``.``, ``*`` and ``\\`` are escaped with a backslash."""
    return _SPECIAL_METRIC_CHARS.sub(r"\\\1", key)


class WandbBackend:
    """Writes records to the wandb run ``run`` (see the module docstring for the two ``steps`` modes).

    ``owns_run`` says whether the bridge created the run, and so finishes it at :meth:`close`.
    """

    def __init__(self, run: Any, *, owns_run: bool, steps: StepsMode, wandb_error: type[BaseException]) -> None:
        if steps not in STEPS_MODES:
            raise ConfigError(f"tracker 'wandb': option 'steps' must be 'own' or 'follow', got {steps!r}")
        self.name = "wandb"
        self.key_rule = WANDB_KEYS
        self.run = run
        self.owns_run = owns_run
        self.steps: StepsMode = steps
        self._wandb_error = wandb_error
        self._defined: set[str] = set()
        self._waiting: deque[StepRecord] = deque()
        self._last_row: int | None = None
        self._last_enqueued: int | None = None
        self._warned_waiting = False
        self._closed = False
        try:
            self.run.define_metric(STEP_KEY, hidden=True)
        except (wandb_error, TypeError, ValueError) as err:
            raise BackendError(
                f"wandb: cannot define the step metric {STEP_KEY!r} on run {self._run_id}: {err}"
            ) from err

    @property
    def _run_id(self) -> str:
        return str(getattr(self.run, "id", "?"))

    def _row(self, record: StepRecord) -> dict[str, float]:
        row: dict[str, float] = {}
        for key, raw in record.values.items():
            if key == STEP_KEY:
                raise BackendError(
                    f"wandb: step {record.step}: the record has a metric named {STEP_KEY!r}, which the wandb "
                    "backend uses for the training step; rename that metric (e.g. with an alias)"
                )
            if not key or key.startswith("_"):
                raise BackendError(
                    f"wandb: step {record.step}: metric key {key!r} is empty or starts with '_', which wandb "
                    "reserves for its own fields; name keys with otel_bridge.exporters.naming.WANDB_KEYS"
                )
            value = float(raw)
            if not math.isfinite(value):
                raise BackendError(
                    f"wandb: step {record.step}: metric {key!r} is {value}; "
                    "non-finite values must be filtered before they reach a backend"
                )
            row[key] = value
        row[STEP_KEY] = float(record.step)
        return row

    def _define(self, keys: list[str]) -> None:
        for key in keys:
            if key in self._defined or key == STEP_KEY:
                continue
            self.run.define_metric(define_metric_name(key), step_metric=STEP_KEY)
            self._defined.add(key)

    def _log(self, record: StepRecord, row: Mapping[str, float], **kwargs: Any) -> None:
        try:
            self._define(sorted(row))
            self.run.log(dict(row), **kwargs)
        except self._wandb_error as err:
            raise BackendError(
                f"wandb: cannot log step {record.step} to run {self._run_id}: {err}; if the run was finished "
                "(wandb.finish()) before the bridge, close the bridge first"
            ) from err

    def write(self, record: StepRecord) -> None:
        """Log ``record`` (``own``: as row ``record.step``; ``follow``: into the trainer's next free row)."""
        if self._closed:
            raise BackendError(f"wandb: the backend for run {self._run_id} is closed; cannot write step {record.step}")
        row = self._row(record)
        if self.steps == "own":
            current = int(self.run.step)
            if record.step < current:
                raise BackendError(
                    f"wandb: step {record.step} is below run {self._run_id}'s current step {current}, and wandb "
                    "drops rows logged below its current step; something else logs to this run: give the bridge "
                    "a run of its own, or set the wandb tracker option steps: follow"
                )
            self._log(record, row, step=record.step, commit=True)
            return
        if self._last_enqueued is None or record.step > self._last_enqueued:
            self._waiting.append(record)
            self._last_enqueued = record.step
        # else: a retry of a record already waiting (an earlier write raised while draining): keep one copy.
        self._drain()

    def _drain(self) -> None:
        """``follow`` mode: add waiting records to the trainer's rows, one record per row, in step order."""
        while self._waiting:
            current = int(self.run.step)
            if self._last_row is not None and current <= self._last_row:
                self._warn_if_stuck(current)
                return
            record = self._waiting[0]
            self._log(record, self._row(record), commit=False)
            self._waiting.popleft()
            # The trainer may move wandb on while we log; assume the later row, so no row gets two records.
            self._last_row = max(current, int(self.run.step))

    def _warn_if_stuck(self, current: int) -> None:
        if self._warned_waiting or len(self._waiting) < WAITING_WARN_THRESHOLD:
            return
        self._warned_waiting = True
        _log.warning(
            "wandb: %d records (steps %d..%d) are waiting because run %s has stayed at step %d; in steps: follow "
            "mode every record needs a new wandb row, which only the trainer's own wandb.log creates. If the "
            "trainer does not log to this run itself, set the wandb tracker option steps: own",
            len(self._waiting),
            self._waiting[0].step,
            self._waiting[-1].step,
            self._run_id,
            current,
        )

    def flush(self) -> None:
        """Add the records that were waiting for a new row of the trainer's, as far as the trainer has gone.

        wandb writes rows in the background; a row the trainer has not committed yet is written when it
        commits it, and everything is on disk when the run finishes.
        """
        if self._closed or self.steps == "own":
            return
        self._drain()

    def close(self) -> None:
        """Write waiting records, and finish the run if the bridge created it. Closing twice is allowed."""
        if self._closed:
            return
        try:
            if self.steps == "follow":
                self._drain()
                self._write_leftovers()
        finally:
            self._closed = True
            if self.owns_run:
                self._finish()

    def _write_leftovers(self) -> None:
        if not self._waiting:
            return
        first, last = self._waiting[0].step, self._waiting[-1].step
        _log.info(
            "wandb: writing %d records (steps %d..%d) in rows of their own after run %s's current step %d: "
            "the trainer did not log new rows for them before the bridge closed",
            len(self._waiting),
            first,
            last,
            self._run_id,
            int(self.run.step),
        )
        try:
            self.run.log({}, commit=True)
        except self._wandb_error as err:
            raise BackendError(
                f"wandb: cannot write steps {first}..{last} to run {self._run_id} at close: {err}; "
                "close the bridge before wandb.finish()"
            ) from err
        while self._waiting:
            record = self._waiting[0]
            self._log(record, self._row(record), commit=True)
            self._waiting.popleft()

    def _finish(self) -> None:
        try:
            self.run.finish()
        except (self._wandb_error, OSError) as err:
            raise BackendError(f"wandb: cannot finish run {self._run_id}: {err}") from err


def create_wandb_backend(options: Mapping[str, Any], run_dir: Path) -> WandbBackend:
    """The ``wandb`` tracker: attach to the active ``wandb.run`` when there is one, else create a run.

    Options are :class:`WandbOptions`; those that describe a new run are ignored (with a WARNING) when the bridge
    attaches to an active run.
    """
    parsed = parse_options("wandb", WandbOptions, options)
    project, entity, group, tags, config, mode, steps = (
        parsed.project,
        parsed.entity,
        parsed.group,
        parsed.tags,
        parsed.config,
        parsed.mode,
        parsed.steps,
    )
    name = parsed.name or run_dir.name or None
    directory = under(run_dir, parsed.dir)
    try:
        import wandb
    except ImportError as err:
        raise ConfigError(f"tracker 'wandb' needs the extra: {install_hint('wandb')}") from err
    wandb_error: type[BaseException] = wandb.Error

    active = wandb.run
    if active is not None:
        ignored = [option for option in _CREATE_ONLY_OPTIONS if options.get(option) is not None]
        if ignored:
            _log.warning(
                "wandb: attaching to the active run %s; the option(s) %s describe a run the bridge creates and "
                "are ignored (remove them, or start the bridge before wandb.init to let it create the run)",
                active.id,
                ", ".join(ignored),
            )
        _log.info("wandb: attached to the active run %s (steps: %s)", active.id, steps or "follow")
        return WandbBackend(active, owns_run=False, steps=_steps(steps, "follow"), wandb_error=wandb_error)

    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise BackendError(f"wandb: cannot create the directory {directory}: {err}; choose a writable 'dir'") from err
    try:
        run = wandb.init(
            project=project,
            entity=entity,
            name=name,
            group=group,
            tags=tags,
            config=config,
            dir=str(directory),
            mode=mode,
        )
    except (wandb_error, OSError, ValueError, TypeError) as err:
        raise BackendError(
            f"wandb: cannot start a run (project {project!r}, mode {mode or 'from $WANDB_MODE'}): {err}; "
            "check the wandb tracker options, or set WANDB_MODE=offline to log without a server"
        ) from err
    _log.info("wandb: created run %s in %s (steps: %s)", run.id, directory, steps or "own")
    try:
        return WandbBackend(run, owns_run=True, steps=_steps(steps, "own"), wandb_error=wandb_error)
    except BackendError:
        run.finish()
        raise


def _steps(value: str | None, default: StepsMode) -> StepsMode:
    if value is None:
        return default
    return "own" if value == "own" else "follow"
