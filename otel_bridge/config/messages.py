"""Validation errors as users read them: every problem on its own line, naming the key and what is allowed.

Used for the main configuration (:mod:`otel_bridge.config.model`) and for every tracker's options
(:mod:`otel_bridge.exporters.backends.options`), so both read the same.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any, Final

from pydantic import BaseModel, ValidationError


def _model_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model class that owns the last element of ``loc`` (for listing allowed keys)."""
    current: type[BaseModel] | None = model
    for part in loc[:-1]:
        if current is None:
            return None
        if isinstance(part, int):
            continue
        field = current.model_fields.get(part)
        if field is None:
            return None
        current = _model_type(field.annotation)
    return current


def _model_type(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_type(arg)
        if found is not None:
            return found
    return None


def _loc_text(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _did_you_mean(loc: tuple[int | str, ...], owner: type[BaseModel] | None) -> str:
    """``; did you mean 'prometheus.scrape_interval_s'?`` for a misspelt key, or ``''``."""
    if owner is None or not loc or not isinstance(loc[-1], str):
        return ""
    close = difflib.get_close_matches(loc[-1], list(owner.model_fields), n=1, cutoff=0.6)
    return f"; did you mean '{_loc_text((*loc[:-1], close[0]))}'?" if close else ""


MAX_SHOWN_CHARS = 200
"""The most characters of a value an error quotes (the rest is counted: ``... (5000000 characters)``)."""
MAX_LINE_CHARS = 2000
"""The most characters of one problem's own text (a validator's message may quote a value)."""
MAX_PROBLEMS = 50
"""The most problems one error lists (the rest are counted: ``... and 19950 more``)."""

_SECRET_KEYS = re.compile(r"auth|password|token|secret|api_key|credential", re.IGNORECASE)
HIDDEN: Final = "<hidden>"
"""What a ``repr()`` shows instead of the value of a key that names credentials (:func:`names_a_secret`)."""


def names_a_secret(key: str) -> bool:
    """Whether a config key names credentials (``auth``, ``password``, ``token``, ``secret``, ``api_key``,
    ``credential`` anywhere in it): its value is never quoted in an error or shown in a ``repr()``."""
    return _SECRET_KEYS.search(key) is not None


def _shown(loc: tuple[int | str, ...], value: Any) -> str:
    """``value`` as an error may quote it: never under a key that holds credentials (an inline secret written in the
    wrong shape, e.g. ``auth: "Bearer tok-..."`` or ``bearer_token_env: ["tok-..."]``), only its type there."""
    if any(isinstance(part, str) and names_a_secret(part) for part in loc):
        return f"a {type(value).__name__} (not shown: it may hold a secret)"
    if isinstance(value, str | bytes) and len(value) > MAX_SHOWN_CHARS:
        return f"{value[:MAX_SHOWN_CHARS]!r}... ({len(value)} characters)"
    return _bounded(repr(value))


def _bounded(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _line_of(loc: tuple[int | str, ...], places: Mapping[tuple[int | str, ...], int]) -> str:
    """`` (line 7)``: the line of the longest prefix of ``loc`` the file has, or ``''``."""
    for end in range(len(loc), 0, -1):
        if loc[:end] in places:
            return f" (line {places[loc[:end]]})"
    return ""


def format_validation_error(
    exc: ValidationError,
    model: type[BaseModel],
    what: str = "otel-bridge config",
    places: Mapping[tuple[int | str, ...], int] | None = None,
) -> str:
    """Turn pydantic's errors into lines that name the key and what is allowed, under the header ``invalid <what>``;
    with ``places`` (a YAML file's key paths -> lines), each line ends with the line of the file it is about.
    Bounded: at most :data:`MAX_PROBLEMS` lines (the rest counted), values quoted up to :data:`MAX_SHOWN_CHARS`."""
    lines: list[str] = []
    errors = exc.errors(include_url=False, include_input=True)
    for error in errors[:MAX_PROBLEMS]:
        loc = tuple(error["loc"])
        before = len(lines)
        key = _loc_text(loc)
        kind = error["type"]
        if kind == "extra_forbidden":
            owner = _model_at(model, loc)
            allowed = ", ".join(owner.model_fields) if owner else "see the README's config reference"
            lines.append(f"unknown key '{key}'; allowed keys here: {allowed}{_did_you_mean(loc, owner)}")
        elif kind == "literal_error":
            expected = error.get("ctx", {}).get("expected", "")
            lines.append(f"'{key}' = {_shown(loc, error['input'])} is not allowed; expected {expected}")
        elif kind == "value_error":
            message = _bounded(str(error.get("ctx", {}).get("error", error["msg"])), MAX_LINE_CHARS)
            lines.append(f"'{key}': {message}" if loc and not message.startswith(key) else message)
        elif kind == "missing":
            lines.append(f"missing key '{key}'")
        else:
            lines.append(f"'{key}' = {_shown(loc, error.get('input'))}: {error['msg']}")
        if places and len(lines) > before:
            lines[-1] += _line_of(loc, places)
    count = len(errors)
    if count > len(lines):
        lines.append(f"... and {count - len(lines)} more")
    header = f"invalid {what}" + (f" ({count} problems)" if count > 1 else "")
    return header + ":\n  - " + "\n  - ".join(lines)
