"""Trackio backend: local-first experiment tracking (SQLite under ``$TRACKIO_DIR``) from Hugging Face.

Each record is one ``run.log(values, step=record.step)``. Trackio keeps every logged row with its explicit
step (it has no "current step" that drops late rows), so records can arrive after the trainer logged later
steps to the same run.

Limits of trackio that the backend cannot work around:

- the store is process-wide: ``$TRACKIO_DIR`` (default ``$HF_HOME/trackio``), read once when trackio is
  first imported, so the backend has no directory option;
- ``Run.log`` queues the row for a background thread and reports its own failures as Python warnings
  instead of raising, so a failure to store a row is not a :class:`BackendError` (the backend does raise
  for invalid records, and after :meth:`TrackioBackend.close`);
- rows are timestamped when trackio receives them: the record's ``time`` is not stored;
- which run is "current" is kept in a ``contextvars.ContextVar`` of ``trackio.context_vars`` (no public
  accessor): the backend reads it to attach to the trainer's run, and clears it after creating a run of its
  own, so that run never becomes the trainer's current run.

``trackio`` is imported when a backend is created.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from otel_bridge.errors import BackendError, ConfigError, install_hint
from otel_bridge.exporters.backends.options import BackendOptions, NonEmptyStr, StrMapping, parse_options
from otel_bridge.exporters.naming import TRACKIO_KEYS, TRACKIO_RESERVED
from otel_bridge.exporters.record import StepRecord

_log = logging.getLogger(__name__)

DEFAULT_PROJECT: Final = "otel-bridge"


class TrackioOptions(BackendOptions):
    """Options of the ``trackio`` tracker, all describing a run the bridge creates (ignored, with a WARNING, when it
    attaches to the trainer's current run)."""

    project: NonEmptyStr = DEFAULT_PROJECT
    name: NonEmptyStr | None = None
    """Default the bridge's run name."""
    group: NonEmptyStr | None = None
    config: StrMapping | None = None
    """Stored as the run's config."""


class TrackioBackend:
    """Logs records to the trackio run ``run``; ``owns_run`` says whether the bridge created it, and so
    finishes it at :meth:`close`."""

    def __init__(self, run: Any, *, owns_run: bool) -> None:
        self.name = "trackio"
        self.key_rule = TRACKIO_KEYS
        self.run = run
        self.owns_run = owns_run
        self._closed = False

    def _values(self, record: StepRecord) -> dict[str, float]:
        values: dict[str, float] = {}
        for key, raw in record.values.items():
            if key in TRACKIO_RESERVED or key.startswith("__"):
                raise BackendError(
                    f"trackio: step {record.step}: metric key {key!r} is reserved by trackio (it would be renamed "
                    f"'__{key.removeprefix('__')}'); rename the metric (e.g. with an alias)"
                )
            value = float(raw)
            if not math.isfinite(value):
                raise BackendError(
                    f"trackio: step {record.step}: metric {key!r} is {value}; "
                    "non-finite values must be filtered before they reach a backend"
                )
            values[key] = value
        return values

    def write(self, record: StepRecord) -> None:
        """Queue the record as one trackio row at ``step = record.step``."""
        if self._closed:
            raise BackendError(
                f"trackio: the backend for run {self.run.name!r} is closed; cannot write step {record.step}"
            )
        self.run.log(self._values(record), step=record.step)

    def flush(self) -> None:
        """Nothing to force: trackio's background thread stores queued rows within about a second, and
        :meth:`close` waits for them when the bridge created the run."""

    def close(self) -> None:
        """Finish the run (waiting for queued rows) if the bridge created it. Closing twice is allowed."""
        if self._closed:
            return
        self._closed = True
        if self.owns_run:
            self.run.finish()


def create_trackio_backend(options: Mapping[str, Any], run_dir: Path) -> TrackioBackend:
    """The ``trackio`` tracker: attach to the trainer's current trackio run when there is one, else create
    a run where trackio's own settings put it: locally under ``$TRACKIO_DIR``, unless ``$TRACKIO_SPACE_ID``
    or ``$TRACKIO_SERVER_URL`` send it elsewhere."""
    parsed = parse_options("trackio", TrackioOptions, options)
    project, group, config = parsed.project, parsed.group, parsed.config
    name = parsed.name or run_dir.name or None
    try:
        import trackio
        from trackio import context_vars
    except ImportError as err:
        raise ConfigError(f"tracker 'trackio' needs the extra: {install_hint('trackio')}") from err

    active = context_vars.current_run.get()
    if active is not None:
        ignored = [option for option in TrackioOptions.model_fields if options.get(option) is not None]
        if ignored:
            _log.warning(
                "trackio: attaching to the current run %r; the option(s) %s describe a run the bridge creates "
                "and are ignored",
                active.name,
                ", ".join(ignored),
            )
        _log.info("trackio: attached to the current run %r of project %r", active.name, active.project)
        return TrackioBackend(active, owns_run=False)
    try:
        run = trackio.init(
            project=str(project),
            name=name,
            group=group,
            config=config,
            embed=False,
            auto_log_cpu=False,
            auto_log_gpu=False,
        )
    except (ValueError, OSError) as err:
        raise BackendError(
            f"trackio: cannot start a run in project {project!r}: {err}; check the trackio options"
        ) from err
    finally:
        # trackio.init makes its run the calling thread's current run; the bridge's run stays the bridge's:
        # the trainer's own trackio.log() must not land in it, nor a later bridge attach to it once finished.
        context_vars.current_run.set(None)
    _log.info("trackio: created run %r in project %r", run.name, project)
    return TrackioBackend(run, owns_run=True)
