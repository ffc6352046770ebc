"""Building PromQL safely: name validation, string-literal quoting and small expression combinators.

Every function is pure. Names that do not match the Prometheus grammar (:mod:`otel_bridge.prometheus_names`) raise
:class:`ConfigError`, so a misspelled metric or label in the configuration is reported at start-up instead of
producing a query that Prometheus rejects (or, worse, silently matches nothing).

Label values are quoted with the escapes that Go string literals (which PromQL uses) and JSON have in
common, so a value can never break out of its literal whatever characters it holds.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from typing import Final

from otel_bridge.errors import ConfigError
from otel_bridge.prometheus_names import LABEL_NAME, METRIC_NAME

__all__ = [
    "duration",
    "packed_unions",
    "parse_duration",
    "quote_label_value",
    "regex_alternation",
    "selector",
    "tag_series",
    "target_duration",
    "union",
    "validate_label_name",
    "validate_metric_name",
    "value_alternation",
]

# Escapes valid both in Go double-quoted string literals and in JSON strings.
_SHORT_ESCAPES = {
    "\\": "\\\\",
    '"': '\\"',
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\b": "\\b",
    "\f": "\\f",
}

# Characters that RE2 (the regex engine of PromQL matchers) treats as syntax.
_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")


def validate_metric_name(name: str) -> str:
    """Return ``name`` if it is a valid Prometheus metric name (``[a-zA-Z_:][a-zA-Z0-9_:]*``).

    Raises :class:`ConfigError` naming the offending value otherwise.
    """
    if not isinstance(name, str) or METRIC_NAME.fullmatch(name) is None:
        raise ConfigError(
            f"invalid Prometheus metric name {name!r}: a metric name must match [a-zA-Z_:][a-zA-Z0-9_:]* "
            "(letters, digits, '_' and ':', not starting with a digit)"
        )
    return name


def validate_label_name(name: str) -> str:
    """Return ``name`` if it is a valid user label name (``[a-zA-Z_][a-zA-Z0-9_]*``, no ``__`` prefix).

    Names starting with ``__`` are reserved for Prometheus' internal labels. Raises :class:`ConfigError`
    naming the offending value otherwise.
    """
    if not isinstance(name, str) or LABEL_NAME.fullmatch(name) is None:
        raise ConfigError(
            f"invalid Prometheus label name {name!r}: a label name must match [a-zA-Z_][a-zA-Z0-9_]* "
            "(letters, digits and '_', not starting with a digit)"
        )
    if name.startswith("__"):
        raise ConfigError(
            f"invalid label name {name!r}: names starting with '__' are reserved for Prometheus; "
            "choose a name without the leading double underscore"
        )
    return name


def quote_label_value(value: str) -> str:
    """Quote ``value`` as a PromQL double-quoted string literal, e.g. ``a"b`` -> ``"a\\"b"``.

    Backslash, double quote and control characters are escaped; other characters (including any
    non-ASCII text) are kept as they are. The result is both a valid Go string literal and a valid
    JSON string, and decodes to exactly ``value``. Raises :class:`ConfigError` for a string that
    cannot be encoded as UTF-8 (an unpaired surrogate).
    """
    if not isinstance(value, str):
        raise ConfigError(f"a label value must be a string, got {type(value).__name__} {value!r}")
    parts: list[str] = ['"']
    for char in value:
        short = _SHORT_ESCAPES.get(char)
        if short is not None:
            parts.append(short)
            continue
        code = ord(char)
        if code < 0x20 or code == 0x7F:
            parts.append(f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:
            raise ConfigError(
                f"label value {value!r} contains an unpaired surrogate (U+{code:04X}) that cannot be "
                "sent to Prometheus; use valid Unicode text"
            )
        else:
            parts.append(char)
    parts.append('"')
    return "".join(parts)


def selector(metric: str, matchers: Mapping[str, str] | None = None, *, utf8: bool = False) -> str:
    """Build an instant-vector selector such as ``vllm:x{a="b",c="d"}`` (matchers sorted by label name).

    The metric and label names are validated, the values quoted. Without matchers the bare metric name is returned.
    With ``utf8`` (an ``otlp:`` entry whose translation strategy keeps dots: ``NoUTF8EscapingWithSuffixes``,
    ``NoTranslation``) a name outside the classic grammar is a UTF-8 name and is quoted inside the braces,
    ``{"trainer.tokens_total",a="b"}``, which only a store with UTF-8 names (Prometheus 3) parses;
    :func:`otel_bridge.producers.promql.check_names` refuses such entries on any other store at start-up.
    """
    given = matchers or {}
    inner = [f"{validate_label_name(label)}={quote_label_value(given[label])}" for label in sorted(given)]
    if utf8 and isinstance(metric, str) and metric and METRIC_NAME.fullmatch(metric) is None:
        return "{" + ",".join([quote_label_value(metric), *inner]) + "}"
    validate_metric_name(metric)
    if not inner:
        return metric
    return f"{metric}{{{','.join(inner)}}}"


MAX_DURATION_MS: Final = (2**63 - 1) // 1_000_000
"""The longest duration Prometheus parses, in milliseconds: it holds durations as int64 nanoseconds (Go's
``time.Duration``; ``model.ParseDuration`` refuses more as "out of range"), about 292 years."""


def duration(seconds: float) -> str:
    """Format ``seconds`` as a PromQL duration with millisecond precision: ``30.0`` -> ``"30s"``,
    ``1.5`` -> ``"1500ms"``.

    Whole seconds are written in ``s``, anything else in ``ms``. Raises :class:`ConfigError` for a
    value that is not finite, rounds to less than one millisecond or is longer than Prometheus parses
    (:data:`MAX_DURATION_MS`).
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds):
        raise ConfigError(f"a PromQL duration must be a finite number of seconds, got {seconds!r}")
    if seconds * 1000 > MAX_DURATION_MS:
        raise ConfigError(
            f"a PromQL duration must be at most {MAX_DURATION_MS // 1000} seconds (about 292 years, the longest "
            f"Prometheus parses), got {seconds!r} seconds"
        )
    millis = round(seconds * 1000)
    if millis < 1:
        raise ConfigError(f"a PromQL duration must be at least 1ms, got {seconds!r} seconds")
    if millis % 1000 == 0:
        return f"{millis // 1000}s"
    return f"{millis}ms"


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|y|w|d|h|m|s)")
_DURATION_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}


@functools.lru_cache(maxsize=256)
def parse_duration(text: str) -> float:
    """A Prometheus duration (``15s``, ``1m30s``, ``500ms``) in seconds; :class:`ConfigError` when it is not one.

    Remembered: a targets list repeats a few intervals over every target (100,000 targets took 3.7 s to parse)."""
    stripped = text.strip()
    parts = _DURATION_PART.findall(stripped)
    if not parts or "".join(n + u for n, u in parts) != stripped:
        raise ConfigError(f"{text!r} is not a Prometheus duration such as 15s, 1m30s or 500ms")
    return sum(float(number) * _DURATION_UNIT_S[unit] for number, unit in parts)


def target_duration(value: object) -> float | None:
    """A duration field of Prometheus' targets list (``"15s"``) in seconds; ``None`` when absent or not a duration."""
    if not isinstance(value, str):
        return None
    try:
        return parse_duration(value)
    except ConfigError:
        return None


def tag_series(expr: str, label: str, value: str) -> str:
    """Add the label ``label="value"`` to every series of ``expr``.

    Returns ``label_replace((expr), "label", "value", "", "")``: the empty source label always matches the
    empty regex, so the destination label is set unconditionally.
    """
    validate_label_name(label)
    return f'label_replace(({expr}), {quote_label_value(label)}, {quote_label_value(value)}, "", "")'


def union(exprs: Sequence[str]) -> str:
    """Combine expressions with ``or``: ``["a", "b"]`` -> ``"(a) or (b)"``.

    Raises :class:`ConfigError` for an empty sequence.
    """
    if isinstance(exprs, str):
        raise ConfigError("union() takes a sequence of PromQL expressions, not a single string")
    if not exprs:
        raise ConfigError("union() needs at least one PromQL expression")
    return " or ".join(f"({expr})" for expr in exprs)


def packed_unions(exprs: Sequence[str], max_bytes: int | None) -> list[str]:
    """``exprs`` combined with ``or`` (:func:`union`) into as few expressions as fit ``max_bytes`` each, whole
    expressions in order (one longer than ``max_bytes`` alone stays alone); one union when ``max_bytes`` is ``None``."""
    if max_bytes is None:
        return [union(exprs)]
    groups: list[list[str]] = []
    for expr in exprs:
        if groups and len(union([*groups[-1], expr]).encode()) <= max_bytes:
            groups[-1].append(expr)
        else:
            groups.append([expr])
    return [union(group) for group in groups]


def regex_alternation(names: Sequence[str], *, utf8: bool = False) -> str:
    """Quoted RE2 alternation of metric names for a ``{__name__=~...}`` matcher: ``"a|b|c"``.

    Every name is validated as a metric name and regex-escaped. With ``utf8`` (names of resolved queries, which the
    configuration and :func:`otel_bridge.producers.promql.check_names` have already checked) a name may also be
    a UTF-8 name such as ``trainer.tokens_total``: a matcher's value parses on every store. Raises
    :class:`ConfigError` for an empty sequence or an invalid name.
    """
    if isinstance(names, str):
        raise ConfigError("regex_alternation() takes a sequence of metric names, not a single string")
    if not names:
        raise ConfigError("regex_alternation() needs at least one metric name")
    checked = [n if utf8 and isinstance(n, str) and n else validate_metric_name(n) for n in names]
    escaped = ("".join(f"\\{c}" if c in _RE2_SPECIAL else c for c in n) for n in checked)
    return quote_label_value("|".join(escaped))


def value_alternation(values: Sequence[str]) -> str:
    """Quoted RE2 alternation matching exactly the given label values (any text, regex-escaped): ``"a|b\\.c"``."""
    if isinstance(values, str) or not values:
        raise ConfigError("value_alternation() needs a non-empty sequence of label values")
    escaped = ("".join(f"\\{c}" if c in _RE2_SPECIAL else c for c in v) for v in values)
    return quote_label_value("|".join(escaped))
