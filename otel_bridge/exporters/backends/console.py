"""Console backend: a compact one-line summary per step, written to a text stream."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TextIO

from otel_bridge.errors import BackendError, ConfigError
from otel_bridge.exporters.backends.options import BackendOptions, PositiveInt, parse_options
from otel_bridge.exporters.naming import PHASE_PREFIX
from otel_bridge.exporters.record import StepRecord

HEALTH_PREFIX = "otel_bridge/"
"""The health keys' first segment: they get their own section, last."""


def format_record(record: StepRecord, max_keys: int, infra_prefix: str = "rollout") -> str:
    """One line for ``record``, in sections: every trainer key, then at most ``max_keys`` infrastructure and phase
    keys, then the notes, then the health keys:
    ``step 12 | actor/loss=0.31 | val/test_score=0.5 | rollout/vllm/...=512 | (+3 more) | note: ... | health:
    missing_metrics=0, query_errors=0``.

    Infrastructure keys are those under ``infra_prefix/`` (``naming.infra_prefix``) or ``phase/``; health keys those
    under ``otel_bridge/``; every other key is the trainer's. Keys are sorted within a section, values ``%.4g``.
    """
    infra = tuple(f"{p}/" for p in (infra_prefix, PHASE_PREFIX) if p)
    health = sorted(k for k in record.values if k.startswith(HEALTH_PREFIX))
    pipeline = sorted(k for k in record.values if k.startswith(infra) and not k.startswith(HEALTH_PREFIX))
    trainer = sorted(set(record.values) - set(health) - set(pipeline))
    parts = [f"step {record.step}"]
    parts.extend(f"{key}={float(record.values[key]):.4g}" for key in [*trainer, *pipeline[:max_keys]])
    if len(pipeline) > max_keys:
        parts.append(f"(+{len(pipeline) - max_keys} more)")
    parts.extend(f"note: {note}" for note in record.notes)
    if health:
        shown = (f"{key.removeprefix(HEALTH_PREFIX)}={float(record.values[key]):.4g}" for key in health)
        parts.append("health: " + ", ".join(shown))
    return " | ".join(parts)


class ConsoleBackend:
    """Writes one line per ``every``-th step (steps divisible by ``every``): every trainer key, at most ``max_keys``
    infrastructure keys, the health keys last (:func:`format_record`).

    ``stream`` defaults to the ``sys.stdout`` current at each write, so redirections made after start-up
    apply.
    """

    def __init__(
        self, stream: TextIO | None = None, every: int = 1, max_keys: int = 20, infra_prefix: str = "rollout"
    ) -> None:
        if every < 1:
            raise ConfigError(f"console: 'every' must be >= 1, got {every}")
        if max_keys < 1:
            raise ConfigError(f"console: 'max_keys' must be >= 1, got {max_keys}")
        self.name = "console"
        self.every = every
        self.max_keys = max_keys
        self.infra_prefix = infra_prefix
        self._stream = stream
        self._closed = False

    @property
    def stream(self) -> TextIO:
        """The stream lines are written to."""
        return sys.stdout if self._stream is None else self._stream

    def write(self, record: StepRecord) -> None:
        """Write the record's line when its step is one of every ``every`` steps."""
        if self._closed:
            raise BackendError(f"console: the backend is closed; cannot write step {record.step}")
        if record.step % self.every != 0:
            return
        try:
            self.stream.write(format_record(record, self.max_keys, self.infra_prefix) + "\n")
        except (OSError, ValueError) as err:
            raise BackendError(f"console: cannot write step {record.step}: {err}") from err

    def flush(self) -> None:
        """Flush the stream."""
        if self._closed:
            return
        try:
            self.stream.flush()
        except (OSError, ValueError) as err:
            raise BackendError(f"console: cannot flush the stream: {err}") from err

    def close(self) -> None:
        """Flush the stream; the stream itself stays open (it is not the backend's)."""
        if self._closed:
            return
        self.flush()
        self._closed = True


class ConsoleOptions(BackendOptions):
    """Options of the ``console`` tracker."""

    every: PositiveInt = 1
    """Write every N-th step."""
    max_keys: PositiveInt = 20
    """Most infrastructure keys shown per line (every trainer and health key is shown)."""
    infra_prefix: str = "rollout"
    """The run's ``naming.infra_prefix``: keys under it (and ``phase/``) are the infrastructure section."""
    stream: Literal["stdout", "stderr"] = "stdout"
    """Where the lines go."""


def create_console_backend(options: Mapping[str, Any], run_dir: Path) -> ConsoleBackend:
    """The ``console`` tracker: one line per step on stdout or stderr (``run_dir`` is not used)."""
    del run_dir  # the console writes to a stream, not to the run directory
    parsed = parse_options("console", ConsoleOptions, options)
    stream = None if parsed.stream == "stdout" else sys.stderr
    return ConsoleBackend(stream=stream, every=parsed.every, max_keys=parsed.max_keys, infra_prefix=parsed.infra_prefix)
