"""Tracker backends, one module per tracker with its options model, and the face a plugin backend is written against.

A backend (built-in or a plugin) is anything with ``name``, ``write``, ``flush`` and ``close`` (:class:`Backend`),
created by a factory ``(options, run_dir) -> Backend`` (:data:`BackendFactory`) that validates its options with a
:class:`BackendOptions` model (:func:`parse_options`, and the option types below). A plugin declares its factory as an
entry point of the group :data:`ENTRY_POINT_GROUP`; :func:`create_backend` builds any kind (docs/backends.md).
"""

from otel_bridge.config.trackers import ENTRY_POINT_GROUP
from otel_bridge.exporters.backends.base import Backend
from otel_bridge.exporters.backends.options import (
    BackendOptions,
    NonEmptyStr,
    PathOption,
    PositiveInt,
    StrList,
    StrMapping,
    parse_options,
    under,
)
from otel_bridge.exporters.backends.registry import BackendFactory, create_backend

__all__ = [
    "ENTRY_POINT_GROUP",
    "Backend",
    "BackendFactory",
    "BackendOptions",
    "NonEmptyStr",
    "PathOption",
    "PositiveInt",
    "StrList",
    "StrMapping",
    "create_backend",
    "parse_options",
    "under",
]
