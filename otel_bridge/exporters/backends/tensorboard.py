"""TensorBoard backend: scalar summaries in an event file, written with tensorboard's own writer.

Only the ``tensorboard`` package is needed (no TensorFlow, no PyTorch). It is imported when a backend is
created.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from otel_bridge.errors import BackendError, ConfigError, install_hint
from otel_bridge.exporters.backends.options import BackendOptions, PathOption, of_another_run, parse_options, under
from otel_bridge.exporters.record import StepRecord

_log = logging.getLogger(__name__)

FLOAT32_MAX = 3.4028234663852886e38
"""TensorBoard stores scalars as 32-bit floats; larger magnitudes would read back as infinity."""


class TensorBoardBackend:
    """Writes each record as one event (``step`` = record step, ``wall_time`` = record time) whose summary
    carries one scalar per key. The event file is flushed after every record.

    Values beyond the 32-bit float range are not written (a WARNING names the key once): TensorBoard would
    show them as infinity.
    """

    def __init__(self, logdir: Path) -> None:
        try:
            from tensorboard.compat.proto import event_pb2, summary_pb2
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError as err:
            raise ConfigError(f"tracker 'tensorboard' needs the extra: {install_hint('tensorboard')}") from err
        self.name = "tensorboard"
        self.logdir = logdir
        self._event_pb2: Any = event_pb2
        self._summary_pb2: Any = summary_pb2
        self._out_of_range_keys: set[str] = set()
        self._closed = False
        try:
            self._writer: Any = EventFileWriter(str(logdir))
        except OSError as err:
            raise BackendError(
                f"tensorboard: cannot create an event file in {logdir}: {err}; choose a writable logdir"
            ) from err

    def _summary(self, record: StepRecord) -> Any:
        values = []
        for key in sorted(record.values):
            value = float(record.values[key])
            if not math.isfinite(value):
                raise BackendError(
                    f"tensorboard: step {record.step}: metric {key!r} is {value}; "
                    "non-finite values must be filtered before they reach a backend"
                )
            if abs(value) > FLOAT32_MAX:
                if key not in self._out_of_range_keys:
                    self._out_of_range_keys.add(key)
                    _log.warning(
                        "tensorboard: metric %r = %r exceeds the 32-bit float range TensorBoard stores; "
                        "not written (this warning is shown once per key)",
                        key,
                        value,
                    )
                continue
            values.append(self._summary_pb2.Summary.Value(tag=key, simple_value=value))
        return self._summary_pb2.Summary(value=values)

    def write(self, record: StepRecord) -> None:
        """Write the record's scalars as one event and flush the event file."""
        if self._closed:
            raise BackendError(f"tensorboard: the writer for {self.logdir} is closed; cannot write step {record.step}")
        event = self._event_pb2.Event(wall_time=record.time, step=record.step, summary=self._summary(record))
        try:
            self._writer.add_event(event)
            self._writer.flush()
        except OSError as err:
            raise BackendError(f"tensorboard: cannot write step {record.step} to {self.logdir}: {err}") from err

    def flush(self) -> None:
        """Block until every written event is on disk."""
        if self._closed:
            return
        try:
            self._writer.flush()
        except OSError as err:
            raise BackendError(f"tensorboard: cannot flush the event file in {self.logdir}: {err}") from err

    def close(self) -> None:
        """Flush and close the event file. Closing twice is allowed."""
        if self._closed:
            return
        self._closed = True
        try:
            self._writer.close()
        except OSError as err:
            raise BackendError(f"tensorboard: cannot close the event file in {self.logdir}: {err}") from err


class TensorBoardOptions(BackendOptions):
    """Options of the ``tensorboard`` tracker."""

    logdir: PathOption = Path("tensorboard")
    """The directory of the event file, relative to the run directory."""


def create_tensorboard_backend(options: Mapping[str, Any], run_dir: Path) -> TensorBoardBackend:
    """The ``tensorboard`` tracker: scalar summaries in an event file under ``logdir``, a directory no other run
    wrote events into (TensorBoard would show both runs' events as one run); inside the run directory, the events
    are this run's (a resumed run, ``run.resume``, adds its event file beside them, shown as the one run it is)."""
    logdir = under(run_dir, parse_options("tensorboard", TensorBoardOptions, options).logdir)
    if of_another_run(run_dir, logdir) and logdir.is_dir() and any(logdir.glob("events.out.tfevents.*")):
        raise BackendError(
            f"tensorboard: {logdir} already holds an earlier run's event files, and TensorBoard would show this run's "
            "steps interleaved with them as one run: give this run a logdir of its own (the tracker's logdir; for "
            "verl, $TENSORBOARD_DIR), or leave logdir unset (each run then writes <run dir>/tensorboard)"
        )
    return TensorBoardBackend(logdir)
