"""Tracker options as pydantic models: each backend declares an :class:`BackendOptions` subclass, and
:func:`parse_options` validates a tracker's config keys against it, with the same error wording as the main config.

A plugin backend can use the same: subclass :class:`BackendOptions`, call :func:`parse_options` in its factory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from otel_bridge.config.messages import format_validation_error
from otel_bridge.errors import ConfigError


class BackendOptions(BaseModel):
    """Base of a tracker's options: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


OptionsT = TypeVar("OptionsT", bound=BackendOptions)


def parse_options(kind: str, model: type[OptionsT], options: Mapping[str, Any]) -> OptionsT:
    """``options`` (a tracker's keys but ``type``) validated by ``model``.

    Raises :class:`~otel_bridge.errors.ConfigError` listing every problem, each naming the option and what is allowed.
    """
    try:
        return model.model_validate(dict(options))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, model, f"options of tracker {kind!r}")) from None


def _non_empty_str(value: Any) -> Any:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a non-empty string, got {value!r}")
    return value


def _non_empty_path(value: Any) -> Any:
    if not isinstance(value, str | os.PathLike) or not os.fspath(value):
        raise ValueError(f"must be a non-empty path, got {value!r}")
    return Path(value)


def _positive_int(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"must be an integer >= 1, got {value!r}")
    return value


def _str_list(value: Any) -> Any:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(f"must be a list of strings, got {value!r}")
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise ValueError(f"must be a list of non-empty strings; {item!r} is not one")
    return list(value)


def _str_mapping(value: Any) -> Any:
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise ValueError(f"must be a mapping with string keys, got {value!r}")
    return dict(value)


NonEmptyStr = Annotated[str, BeforeValidator(_non_empty_str)]
"""A string with something besides whitespace in it."""
PathOption = Annotated[Path, BeforeValidator(_non_empty_path)]
"""A non-empty path; see :func:`under` for where a relative one points."""
PositiveInt = Annotated[int, BeforeValidator(_positive_int)]
"""An integer >= 1 (``true`` is not one)."""
StrList = Annotated[list[str], BeforeValidator(_str_list)]
"""A list of non-empty strings (one string is not a list)."""
StrMapping = Annotated[dict[str, Any], BeforeValidator(_str_mapping)]
"""A mapping with string keys."""


def under(run_dir: Path, path: Path) -> Path:
    """``path``, a relative one taken under ``run_dir``."""
    return path if path.is_absolute() else run_dir / path


def of_another_run(run_dir: Path, path: Path) -> bool:
    """Whether what ``path`` holds may be another run's: it lies outside ``run_dir``. Inside it, it is this run's own
    (a new run's directory is new; a resumed run, ``run.resume``, continues its own directory)."""
    return not path.resolve().is_relative_to(run_dir.resolve())
