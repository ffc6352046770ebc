"""Which tracker kinds exist and how one is created from configuration.

A kind names a factory ``(options: Mapping[str, Any], run_dir: Path) -> Backend``, referenced as ``module:function``
and imported only when that kind is requested. Built-in kinds are listed in :data:`BUILTIN_BACKENDS`; any other kind
is looked up among the installed plugins, entry points of the group :data:`ENTRY_POINT_GROUP`: the same reference,
declared in the plugin's package metadata instead of here. Built-in kinds take precedence over plugins of the same name.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from otel_bridge.config.trackers import (
    BUILTIN_TRACKERS,
    ENTRY_POINT_GROUP,
    declared_entry_points,
    unknown_tracker_message,
)
from otel_bridge.errors import BackendError, ConfigError
from otel_bridge.exporters.backends.base import Backend

_log = logging.getLogger(__name__)


BackendFactory = Callable[[Mapping[str, Any], Path], Backend]
"""A factory ``(options, run_dir) -> Backend``: what :data:`BACKENDS` holds and what a plugin entry point names."""

BUILTIN_BACKENDS: Final[Mapping[str, str]] = {
    "jsonl": "otel_bridge.exporters.backends.jsonl:create_jsonl_backend",
    "tensorboard": "otel_bridge.exporters.backends.tensorboard:create_tensorboard_backend",
    "console": "otel_bridge.exporters.backends.console:create_console_backend",
    "wandb": "otel_bridge.exporters.backends.wandb:create_wandb_backend",
    "mlflow": "otel_bridge.exporters.backends.mlflow:create_mlflow_backend",
    "trackio": "otel_bridge.exporters.backends.trackio:create_trackio_backend",
}
"""Built-in kind -> ``module:function`` of its factory, declared like a plugin's entry point."""
if tuple(BUILTIN_BACKENDS) != BUILTIN_TRACKERS:  # the configuration check accepts exactly these
    raise RuntimeError("BUILTIN_BACKENDS and otel_bridge.config.trackers.BUILTIN_TRACKERS list different trackers")


def _by_reference(kind: str, reference: str) -> BackendFactory:
    entry_point = importlib.metadata.EntryPoint(name=kind, value=reference, group=ENTRY_POINT_GROUP)

    def create(options: Mapping[str, Any], run_dir: Path) -> Backend:
        factory: BackendFactory = entry_point.load()
        return factory(options, run_dir)

    create.__qualname__ = create.__name__ = f"create_{kind}_backend"
    return create


BACKENDS: dict[str, BackendFactory] = {kind: _by_reference(kind, ref) for kind, ref in BUILTIN_BACKENDS.items()}
"""Built-in backend kind -> factory ``(options, run_dir) -> Backend`` (imports the backend's module when called)."""


def _entry_point_origin(entry_point: importlib.metadata.EntryPoint) -> str:
    dist = entry_point.dist
    source = f" from the distribution {dist.name!r}" if dist is not None else ""
    return f"plugin {entry_point.name!r} ({entry_point.value}{source})"


def plugin_entry_points() -> dict[str, list[importlib.metadata.EntryPoint]]:
    """Installed plugin kinds (entry points of :data:`ENTRY_POINT_GROUP`), each with every entry point that
    declares it. Nothing is imported."""
    found: dict[str, list[importlib.metadata.EntryPoint]] = {}
    for entry_point in declared_entry_points():
        declared = found.setdefault(entry_point.name, [])
        if all(other.value != entry_point.value for other in declared):
            declared.append(entry_point)
    return found


def _unknown_kind(kind: str, plugins: Mapping[str, Sequence[importlib.metadata.EntryPoint]]) -> ConfigError:
    return ConfigError(unknown_tracker_message(kind, set(plugins)))


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
    _log.debug("tracker %r created by %s", kind, origin)
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
