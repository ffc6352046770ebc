"""The backend protocol and the registry that creates backends from configuration."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from otel_bridge.errors import ConfigError
from otel_bridge.exporters.backends.console import ConsoleBackend
from otel_bridge.exporters.backends.jsonl import JsonlBackend
from otel_bridge.exporters.backends.tensorboard import TensorBoardBackend
from otel_bridge.exporters.record import StepRecord


@runtime_checkable
class Backend(Protocol):
    """A tracker that receives one :class:`StepRecord` per training step.

    ``write`` is called in step order, always from the same thread. A backend raises
    :class:`~otel_bridge.errors.BackendError` when it cannot write; the caller isolates it from the other
    backends.
    """

    name: str

    def write(self, record: StepRecord) -> None:
        """Log one step's record."""

    def flush(self) -> None:
        """Push everything written so far to the tracker's storage."""

    def close(self) -> None:
        """Flush and release the tracker's resources. Closing twice is allowed."""


def _check_options(kind: str, options: Mapping[str, Any], allowed: Mapping[str, str]) -> None:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        known = ", ".join(f"{option} ({meaning})" for option, meaning in allowed.items()) or "none"
        raise ConfigError(
            f"tracker {kind!r}: unknown option(s) {', '.join(map(repr, unknown))}; the options are: {known}"
        )


def _path_option(kind: str, options: Mapping[str, Any], option: str, default: str, run_dir: Path) -> Path:
    value = options.get(option, default)
    if not isinstance(value, str | os.PathLike) or not os.fspath(value):
        raise ConfigError(f"tracker {kind!r}: option {option!r} must be a non-empty path, got {value!r}")
    path = Path(value)
    return path if path.is_absolute() else run_dir / path


def _positive_int_option(kind: str, options: Mapping[str, Any], option: str, default: int) -> int:
    value = options.get(option, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"tracker {kind!r}: option {option!r} must be an integer >= 1, got {value!r}")
    return value


def _jsonl(options: Mapping[str, Any], run_dir: Path) -> Backend:
    _check_options("jsonl", options, {"path": "file, relative to the run directory; default metrics.jsonl"})
    return JsonlBackend(_path_option("jsonl", options, "path", "metrics.jsonl", run_dir))


def _tensorboard(options: Mapping[str, Any], run_dir: Path) -> Backend:
    _check_options("tensorboard", options, {"logdir": "directory, relative to the run directory; default tensorboard"})
    return TensorBoardBackend(_path_option("tensorboard", options, "logdir", "tensorboard", run_dir))


def _console(options: Mapping[str, Any], run_dir: Path) -> Backend:
    del run_dir  # the console writes to a stream, not to the run directory
    _check_options(
        "console",
        options,
        {
            "every": "write every N-th step; default 1",
            "max_keys": "most keys shown per line; default 20",
            "stream": "stdout or stderr; default stdout",
        },
    )
    stream_name = options.get("stream", "stdout")
    if stream_name not in ("stdout", "stderr"):
        raise ConfigError(f"tracker 'console': option 'stream' must be 'stdout' or 'stderr', got {stream_name!r}")
    return ConsoleBackend(
        stream=None if stream_name == "stdout" else sys.stderr,
        every=_positive_int_option("console", options, "every", 1),
        max_keys=_positive_int_option("console", options, "max_keys", 20),
    )


BACKENDS: dict[str, Callable[..., Backend]] = {
    "jsonl": _jsonl,
    "tensorboard": _tensorboard,
    "console": _console,
}
"""Backend kind -> factory ``(options, run_dir) -> Backend``."""


def create_backend(kind: str, options: Mapping[str, Any], run_dir: Path) -> Backend:
    """Create the backend ``kind`` with its ``options``; relative paths in the options are under ``run_dir``.

    Raises :class:`~otel_bridge.errors.ConfigError` for an unknown kind or a bad option, and
    :class:`~otel_bridge.errors.BackendError` when the backend cannot open its output.
    """
    factory = BACKENDS.get(kind)
    if factory is None:
        raise ConfigError(f"unknown tracker {kind!r}; the known trackers are: {', '.join(sorted(BACKENDS))}")
    return factory(options, run_dir)
