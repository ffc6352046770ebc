"""The backend protocol, the option helpers, and the registry that creates backends from configuration.

Built-in kinds live in :data:`BACKENDS`. Any other kind is looked up among the installed plugins: entry points
of the group ``otel_bridge.backends`` (see :data:`ENTRY_POINT_GROUP`), each naming a factory
``(options: Mapping[str, Any], run_dir: Path) -> Backend``. A plugin is imported only when its kind is
requested.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

from otel_bridge.errors import BackendError, ConfigError
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


_logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP: Final = "otel_bridge.backends"
"""The entry-point group in which installed packages declare extra tracker kinds."""


def check_options(kind: str, options: Mapping[str, Any], allowed: Mapping[str, str]) -> None:
    """Raise :class:`ConfigError` for options of tracker ``kind`` not in ``allowed`` (option -> meaning)."""
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        known = ", ".join(f"{option} ({meaning})" for option, meaning in allowed.items()) or "none"
        raise ConfigError(
            f"tracker {kind!r}: unknown option(s) {', '.join(map(repr, unknown))}; the options are: {known}"
        )


def path_option(kind: str, options: Mapping[str, Any], option: str, default: str, run_dir: Path) -> Path:
    """The path option ``option`` (or ``default``); a relative path is under ``run_dir``."""
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


def str_option(kind: str, options: Mapping[str, Any], option: str, default: str | None = None) -> str | None:
    """The non-empty string option ``option``, or ``default`` when it is absent or null."""
    value = options.get(option)
    if value is None:
        return default
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"tracker {kind!r}: option {option!r} must be a non-empty string, got {value!r}")
    return value


def choice_option(
    kind: str, options: Mapping[str, Any], option: str, choices: Sequence[str], default: str | None = None
) -> str | None:
    """The option ``option``, which must be one of ``choices``; ``default`` when it is absent or null."""
    value = options.get(option)
    if value is None:
        return default
    if value not in choices:
        allowed = ", ".join(map(repr, choices))
        raise ConfigError(f"tracker {kind!r}: option {option!r} must be one of {allowed}, got {value!r}")
    return str(value)


def str_list_option(kind: str, options: Mapping[str, Any], option: str) -> list[str] | None:
    """The option ``option`` as a list of non-empty strings, or ``None`` when it is absent or null."""
    value = options.get(option)
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ConfigError(f"tracker {kind!r}: option {option!r} must be a list of strings, got {value!r}")
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise ConfigError(
                f"tracker {kind!r}: option {option!r} must be a list of non-empty strings; {item!r} is not one"
            )
    return list(value)


def mapping_option(kind: str, options: Mapping[str, Any], option: str) -> dict[str, Any] | None:
    """The option ``option`` as a dict with string keys, or ``None`` when it is absent or null."""
    value = options.get(option)
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise ConfigError(f"tracker {kind!r}: option {option!r} must be a mapping with string keys, got {value!r}")
    return dict(value)


def _jsonl(options: Mapping[str, Any], run_dir: Path) -> Backend:
    check_options("jsonl", options, {"path": "file, relative to the run directory; default metrics.jsonl"})
    return JsonlBackend(path_option("jsonl", options, "path", "metrics.jsonl", run_dir))


def _tensorboard(options: Mapping[str, Any], run_dir: Path) -> Backend:
    check_options("tensorboard", options, {"logdir": "directory, relative to the run directory; default tensorboard"})
    return TensorBoardBackend(path_option("tensorboard", options, "logdir", "tensorboard", run_dir))


def _console(options: Mapping[str, Any], run_dir: Path) -> Backend:
    del run_dir  # the console writes to a stream, not to the run directory
    check_options(
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


def _wandb(options: Mapping[str, Any], run_dir: Path) -> Backend:
    from otel_bridge.exporters.backends.wandb import create_wandb_backend

    return create_wandb_backend(options, run_dir)


def _mlflow(options: Mapping[str, Any], run_dir: Path) -> Backend:
    from otel_bridge.exporters.backends.mlflow import create_mlflow_backend

    return create_mlflow_backend(options, run_dir)


def _trackio(options: Mapping[str, Any], run_dir: Path) -> Backend:
    from otel_bridge.exporters.backends.trackio import create_trackio_backend

    return create_trackio_backend(options, run_dir)


BackendFactory = Callable[[Mapping[str, Any], Path], Backend]
"""A factory ``(options, run_dir) -> Backend``: what :data:`BACKENDS` holds and what a plugin entry point names."""

BACKENDS: dict[str, BackendFactory] = {
    "jsonl": _jsonl,
    "tensorboard": _tensorboard,
    "console": _console,
    "wandb": _wandb,
    "mlflow": _mlflow,
    "trackio": _trackio,
}
"""Built-in backend kind -> factory ``(options, run_dir) -> Backend``. Built-in kinds take precedence over
plugins of the same name."""


def _entry_point_origin(entry_point: importlib.metadata.EntryPoint) -> str:
    dist = entry_point.dist
    source = f" from the distribution {dist.name!r}" if dist is not None else ""
    return f"plugin {entry_point.name!r} ({entry_point.value}{source})"


def plugin_entry_points() -> dict[str, list[importlib.metadata.EntryPoint]]:
    """Installed plugin kinds (entry points of :data:`ENTRY_POINT_GROUP`), each with every entry point that
    declares it. Nothing is imported."""
    found: dict[str, list[importlib.metadata.EntryPoint]] = {}
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        declared = found.setdefault(entry_point.name, [])
        if all(other.value != entry_point.value for other in declared):
            declared.append(entry_point)
    return found


def _unknown_kind(kind: str, plugins: Mapping[str, Sequence[importlib.metadata.EntryPoint]]) -> ConfigError:
    installed = sorted(set(plugins) - set(BACKENDS))
    plugin_text = ", ".join(installed) if installed else "none"
    return ConfigError(
        f"unknown tracker {kind!r}; the built-in trackers are: {', '.join(sorted(BACKENDS))}; "
        f"installed plugin trackers: {plugin_text} (a package adds one with an entry point in the group "
        f"{ENTRY_POINT_GROUP!r}; see docs/backends.md)"
    )


def _load_plugin_factory(kind: str, entry_point: importlib.metadata.EntryPoint) -> BackendFactory:
    origin = _entry_point_origin(entry_point)
    try:
        factory = entry_point.load()
    except Exception as err:  # a plugin can fail to import in any way; report which plugin it was
        raise BackendError(
            f"tracker {kind!r}: cannot load {origin}: {type(err).__name__}: {err}; "
            "fix or reinstall that package, or remove the tracker from the configuration"
        ) from err
    if not callable(factory):
        raise BackendError(
            f"tracker {kind!r}: {origin} names {factory!r}, which is not callable; the entry point must name a "
            "factory (options: Mapping[str, Any], run_dir: Path) -> Backend"
        )
    return factory  # type: ignore[no-any-return]


def _create_plugin_backend(
    kind: str, entry_point: importlib.metadata.EntryPoint, options: Mapping[str, Any], run_dir: Path
) -> Backend:
    origin = _entry_point_origin(entry_point)
    factory = _load_plugin_factory(kind, entry_point)
    try:
        backend = factory(options, run_dir)
    except ConfigError as err:
        raise ConfigError(f"tracker {kind!r} ({origin}): {err}") from err
    except Exception as err:  # the plugin's own failure: name the plugin, keep the cause
        raise BackendError(
            f"tracker {kind!r}: {origin} failed to create its backend: {type(err).__name__}: {err}"
        ) from err
    if not isinstance(backend, Backend):
        raise BackendError(
            f"tracker {kind!r}: {origin} returned {type(backend).__name__}, which is not a Backend "
            "(it needs a 'name' attribute and write(record), flush() and close() methods)"
        )
    _logger.debug("tracker %r created by %s", kind, origin)
    return backend


def create_backend(kind: str, options: Mapping[str, Any], run_dir: Path) -> Backend:
    """Create the backend ``kind`` with its ``options``; relative paths in the options are under ``run_dir``.

    ``kind`` is a built-in kind (:data:`BACKENDS`) or the name of an installed plugin (an entry point of the
    group :data:`ENTRY_POINT_GROUP`), which is imported only now.

    Raises :class:`~otel_bridge.errors.ConfigError` for an unknown kind, a kind two plugins declare, or a
    bad option, and :class:`~otel_bridge.errors.BackendError` when the backend cannot open its output or a
    plugin fails to load or to create its backend.
    """
    factory = BACKENDS.get(kind)
    if factory is not None:
        return factory(options, run_dir)
    plugins = plugin_entry_points()
    declared = plugins.get(kind)
    if not declared:
        raise _unknown_kind(kind, plugins)
    if len(declared) > 1:
        origins = "; ".join(_entry_point_origin(entry_point) for entry_point in declared)
        raise ConfigError(
            f"tracker {kind!r} is declared by several installed plugins: {origins}; uninstall all but one"
        )
    return _create_plugin_backend(kind, declared[0], options, run_dir)
