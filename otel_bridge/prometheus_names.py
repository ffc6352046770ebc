"""Prometheus names: what a metric or label name may be, and the name an OpenTelemetry instrument gets on its way
through the collector.

The grammar (:data:`METRIC_NAME`, :data:`LABEL_NAME`) is the one definition in otel_bridge: the configuration checks
the names it is given with it, PromQL building (:mod:`otel_bridge.prometheus.promql`) and the exposition parser
(:mod:`otel_bridge.prometheus.exposition`) embed it. Both live here, below the configuration, because the
configuration validates ``metrics[]`` entries with them (a ``name``, a label, an ``otlp`` entry's translated name) and
imports nothing above itself.

**OTLP names.** The trainer's instruments reach Prometheus over OTLP, through ``collector/otelcol.yaml``'s
``prometheusremotewrite`` exporter (otelcol-contrib v0.136.0; its ``prometheus`` exporter names them the same). Both
build the name with ``otlptranslator.MetricNamer{WithMetricSuffixes: ..., Namespace: namespace}`` from
github.com/prometheus/otlptranslator (``metric_namer.go``, read at commit 0d792268; contrib's
``pkg/translator/prometheusremotewrite/metrics_to_prw_v2.go``, read at commit 071a999c, passes ``WithMetricSuffixes:
settings.AddMetricSuffixes``). This module is that function, for the underscore-escaping strategies. With suffixes
(``add_metric_suffixes: true``, the default, or the ``prometheus`` exporter's ``translation_strategy:
UnderscoreEscapingWithSuffixes``):

- the name is split at every character outside ``[a-zA-Z0-9:]`` (dots, dashes, slashes, runs of underscores) and the
  pieces joined with ``_``;
- the unit (UCUM, ``main/per``) adds a suffix unless the name already has it as a piece: ``s`` -> ``seconds``,
  ``By`` -> ``bytes``, ``1`` -> nothing, ``%`` -> ``percent``, ``/s`` -> ``per_second`` (:data:`UNIT_SUFFIXES`,
  :data:`PER_UNIT_SUFFIXES`); a unit in braces (``{token}``) adds nothing; any other unit is added cleaned;
- a monotonic sum (an OTel ``Counter``) ends in ``_total``, a gauge with unit ``1`` in ``_ratio``;
- a namespace is put in front, and a name starting with a digit gets a leading ``_``.

Without suffixes (``add_metric_suffixes: false``, or ``translation_strategy: UnderscoreEscapingWithoutSuffixes``) the
namer's "simple case" runs instead: the name is split at every character outside ``[a-zA-Z0-9:_]`` (so runs of ``_``
stay), the pieces joined with ``_``, and nothing is added for unit or type; a namespace is put in front with ``_``, and
only a name without one gets a leading ``_`` before a digit.

**UTF-8 strategies.** ``NoUTF8EscapingWithSuffixes`` and ``NoTranslation`` (Prometheus 3's OTLP receiver, its
``otlp: translation_strategy``; the collector's ``prometheus`` and ``prometheus_remote_write`` exporters) keep the
name as the trainer wrote it, dots included (otlptranslator v1.0.0, the version Prometheus 3.16 (module v0.316.0)
requires: ``MetricNamer.Build`` -> ``buildMetricName`` when ``UTF8Allowed``; ``strategy.go``'s ``ShouldEscape`` and
``ShouldAddSuffixes``). With suffixes (``NoUTF8EscapingWithSuffixes``) the namespace is put in front with ``_``, then,
innermost first: the main unit's suffix (``_seconds``) unless the name already ends with it; the ``per_`` suffix (the
name's own trailing copy and the character before it removed first); ``_total`` for a counter and ``_ratio`` for a
gauge of unit ``1`` (each trailing copy likewise removed first). ``NoTranslation`` adds nothing but the namespace. Such
a name is queried as ``{"trainer.tokens_total"}``, which only a store with UTF-8 names (Prometheus 3) accepts.

A histogram's series are that name plus ``_bucket``, ``_sum`` and ``_count`` in every strategy.

**Stored forms.** A name with a character outside ``[a-zA-Z0-9_]`` (vLLM's and SGLang's ``vllm:x``, ``sglang:x``)
reaches a store under one of :data:`NAME_FORMS` depending on how it got there (:func:`stored_name`): ``served`` as the
exporter registered it; ``escaped`` with every such character replaced by ``_``, as prometheus_client (0.23 and later)
writes OpenMetrics sample names to a scraper that did not ask for UTF-8 names (Prometheus 2.x, Prometheus 3 with
``metric_name_validation_scheme: legacy``: ``openmetrics/exposition.py``, ``_escape`` with
``_is_legacy_labelname_rune``); ``ray`` escaped the same way and prefixed ``ray_``, as vLLM's
``RayPrometheusStatLogger`` names Ray metrics (``vllm/v1/metrics/ray_wrappers.py``,
``_get_sanitized_opentelemetry_name``) and Ray's metrics agent exports them
(``ray/_private/telemetry/open_telemetry_metric_recorder.py``: ``f"{NAMESPACE}_{name}"``, namespace ``ray``; counters
end in ``_total``). A name of ``[a-zA-Z0-9_]`` alone has only its ``served`` form (:func:`name_forms`).
"""

from __future__ import annotations

import re
from typing import Final, Literal

from otel_bridge.window import MetricKind

__all__ = [
    "ESCAPING_STRATEGIES",
    "INSTRUMENT_KINDS",
    "LABEL_NAME",
    "LABEL_NAME_PATTERN",
    "METRIC_NAME",
    "METRIC_NAME_PATTERN",
    "NAME_FORMS",
    "PER_UNIT_SUFFIXES",
    "STRATEGIES",
    "UNIT_SUFFIXES",
    "Instrument",
    "NameForm",
    "TranslationStrategy",
    "is_classic_name",
    "metric_kind",
    "name_forms",
    "prometheus_name",
    "prometheus_series",
    "stored_name",
]

#: A Prometheus metric name, as a pattern to embed in larger ones (possessive: matching stays linear inside them).
#: The one definition in otel_bridge; :data:`METRIC_NAME` is it compiled (use ``fullmatch``).
METRIC_NAME_PATTERN: Final = r"[a-zA-Z_:][a-zA-Z0-9_:]*+"
METRIC_NAME: Final = re.compile(METRIC_NAME_PATTERN)
#: A Prometheus label name (``__``-prefixed names are reserved, see
#: :func:`otel_bridge.prometheus.promql.validate_label_name`); compiled as :data:`LABEL_NAME`.
LABEL_NAME_PATTERN: Final = r"[a-zA-Z_][a-zA-Z0-9_]*+"
LABEL_NAME: Final = re.compile(LABEL_NAME_PATTERN)

#: OpenTelemetry instrument kinds as the collector sees them. The observable instruments are the same
#: (``ObservableCounter`` is a ``counter``, ``ObservableUpDownCounter`` an ``up_down_counter``,
#: ``ObservableGauge`` a ``gauge``).
Instrument = Literal["counter", "up_down_counter", "gauge", "histogram"]
INSTRUMENT_KINDS: Final[tuple[Instrument, ...]] = ("counter", "up_down_counter", "gauge", "histogram")

#: The ``translation_strategy`` values of otlptranslator's ``strategy.go`` (v1.0.0): Prometheus 3's ``otlp:`` section
#: (3.16 accepts all four, ``config/config.go``) and the collector's ``prometheus`` exporter.
TranslationStrategy = Literal[
    "UnderscoreEscapingWithSuffixes",
    "UnderscoreEscapingWithoutSuffixes",
    "NoUTF8EscapingWithSuffixes",
    "NoTranslation",
]
#: strategy -> (adds unit and type suffixes, escapes to a classic name): ``ShouldAddSuffixes`` and ``ShouldEscape``.
STRATEGIES: Final[dict[str, tuple[bool, bool]]] = {
    "UnderscoreEscapingWithSuffixes": (True, True),
    "UnderscoreEscapingWithoutSuffixes": (False, True),
    "NoUTF8EscapingWithSuffixes": (True, False),
    "NoTranslation": (False, False),
}
#: The strategies that write classic Prometheus names (the other two keep dots and need UTF-8 names): strategy -> with
#: suffixes.
ESCAPING_STRATEGIES: Final[dict[str, bool]] = {
    strategy: suffixes for strategy, (suffixes, escapes) in STRATEGIES.items() if escapes
}

#: otlptranslator's ``unitMap``: the unit (or the part before ``/``) -> the suffix.
UNIT_SUFFIXES: Final[dict[str, str]] = {
    "d": "days",
    "h": "hours",
    "min": "minutes",
    "s": "seconds",
    "ms": "milliseconds",
    "us": "microseconds",
    "ns": "nanoseconds",
    "By": "bytes",
    "KiBy": "kibibytes",
    "MiBy": "mebibytes",
    "GiBy": "gibibytes",
    "TiBy": "tibibytes",
    "KBy": "kilobytes",
    "MBy": "megabytes",
    "GBy": "gigabytes",
    "TBy": "terabytes",
    "m": "meters",
    "V": "volts",
    "A": "amperes",
    "J": "joules",
    "W": "watts",
    "g": "grams",
    "Cel": "celsius",
    "Hz": "hertz",
    "1": "",
    "%": "percent",
}

#: otlptranslator's ``perUnitMap``: the part after ``/`` -> the word after ``per_``.
PER_UNIT_SUFFIXES: Final[dict[str, str]] = {
    "s": "second",
    "m": "minute",
    "h": "hour",
    "d": "day",
    "w": "week",
    "mo": "month",
    "y": "year",
}

_KINDS: Final[dict[Instrument, MetricKind]] = {
    "counter": "counter",
    "up_down_counter": "gauge",
    "gauge": "gauge",
    "histogram": "histogram",
}


def _valid(char: str) -> bool:
    return char == ":" or ("a" <= char <= "z") or ("A" <= char <= "Z") or ("0" <= char <= "9")


def _pieces(text: str, keep: str = "") -> list[str]:
    """Go's ``strings.FieldsFunc(text, not valid)``: the runs of valid characters (and of those in ``keep``)."""
    pieces: list[str] = []
    current: list[str] = []
    for char in text:
        if _valid(char) or char in keep:
            current.append(char)
        elif current:
            pieces.append("".join(current))
            current = []
    if current:
        pieces.append("".join(current))
    return pieces


def _clean_unit(unit: str) -> str:
    """``cleanUpUnit``: invalid characters to ``_``, runs of ``_`` to one, one leading ``_`` dropped."""
    mapped = "".join(char if _valid(char) else "_" for char in unit)
    collapsed: list[str] = []
    for char in mapped:
        if char != "_" or not collapsed or collapsed[-1] != "_":
            collapsed.append(char)
    return "".join(collapsed).removeprefix("_")


def _unit_suffixes(unit: str) -> tuple[str, str]:
    """``buildUnitSuffixes``: the main unit's suffix and the ``per_`` suffix, before cleaning."""
    parts = unit.split("/", 1)
    main = per = ""
    written = parts[0].strip()
    if written and "{" not in written and "}" not in written:
        main = UNIT_SUFFIXES.get(written, written)
    if len(parts) > 1 and parts[1]:
        written = parts[1].strip()
        if written and "{" not in written and "}" not in written:
            per = PER_UNIT_SUFFIXES.get(written, written)
        if per:
            per = "per_" + per
    return main, per


def _with_unit(pieces: list[str], main: str, per: str) -> list[str]:
    """``addUnitTokens``: a suffix the name already has as a piece is not added again."""
    if main in pieces:
        main = ""
    if per == "per_":
        per = ""
    else:
        per = per.removesuffix("_")
        if per in pieces:
            per = ""
    if per:
        main = main.removesuffix("_")
    return pieces + [suffix for suffix in (main, per) if suffix]


def _without_suffixes(name: str, namespace: str) -> str:
    """``buildCompliantMetricName``'s simple case: ``[^a-zA-Z0-9:_]`` separates, nothing is added."""
    translated = "_".join(_pieces(name, keep="_"))
    if namespace:
        return f"{namespace}_{translated}"
    if translated and "0" <= translated[0] <= "9":
        translated = "_" + translated
    return translated


def _with_suffixes(name: str, unit: str, instrument: Instrument, namespace: str) -> str:
    """``normalizeName``: words, unit suffixes, ``_total`` and ``_ratio``."""
    main, per = _unit_suffixes(unit)
    pieces = _with_unit(_pieces(name), _clean_unit(main), _clean_unit(per))
    if instrument == "counter":
        pieces = [piece for piece in pieces if piece != "total"] + ["total"]
    if unit == "1" and instrument == "gauge":
        pieces = [piece for piece in pieces if piece != "ratio"] + ["ratio"]
    if namespace:
        pieces = [namespace, *pieces]
    translated = "_".join(pieces)
    if translated and "0" <= translated[0] <= "9":
        translated = "_" + translated
    return translated


def _trim_suffix(name: str, suffix: str) -> str:
    """``trimSuffixAndDelimiter``: ``suffix`` and the one character before it, when the name is longer than both."""
    if name.endswith(suffix) and len(name) > len(suffix) + 1:
        return name[: -(len(suffix) + 1)]
    return name


def _utf8(name: str, unit: str, instrument: Instrument, namespace: str, suffixes: bool) -> str:
    """``buildMetricName``: the name kept as it is, suffixes appended with ``_`` (see the module docstring)."""
    if namespace:
        name = f"{namespace}_{name}"
    if not suffixes:
        return name
    after: list[str] = []  # outermost last, as Go's deferred appends run
    if unit == "1" and instrument == "gauge":
        name = _trim_suffix(name, "ratio")
        after.insert(0, "ratio")
    if instrument == "counter":
        name = _trim_suffix(name, "total")
        after.insert(0, "total")
    main, per = _unit_suffixes(unit)
    if per:
        name = _trim_suffix(name, per)
        after.insert(0, per)
    if main and not name.endswith(main):
        name = f"{name}_{main}"
    return "_".join([name, *after])


def is_classic_name(name: str) -> bool:
    """Whether ``name`` is a metric name every Prometheus-compatible store holds and queries bare
    (``[a-zA-Z_:][a-zA-Z0-9_:]*``); any other is a UTF-8 name, quoted as ``{"a.b"}`` (Prometheus 3)."""
    return METRIC_NAME.fullmatch(name) is not None


def prometheus_name(
    name: str,
    unit: str = "",
    instrument: Instrument = "gauge",
    namespace: str = "",
    suffixes: bool = True,
    escape: bool = True,
) -> str:
    """The metric name the collector (or Prometheus' OTLP receiver) writes for an OpenTelemetry instrument ``name``
    with ``unit``.

    ``instrument`` is the instrument's kind (:data:`INSTRUMENT_KINDS`), ``namespace`` the exporter's ``namespace``
    (none in the shipped config), ``suffixes`` whether unit and type suffixes are added (the exporter's
    ``add_metric_suffixes``, true by default), ``escape`` whether the name is escaped to a classic one (false for the
    UTF-8 strategies; :data:`STRATEGIES` maps a ``translation_strategy`` to both). Raises :class:`ValueError` for a
    name that cannot be translated (nothing but punctuation when escaped, empty otherwise): it is dropped.
    """
    if instrument not in _KINDS:
        raise ValueError(f"instrument must be one of {', '.join(INSTRUMENT_KINDS)}, not {instrument!r}")
    if not escape:
        if not name:
            raise ValueError("an empty metric name cannot be translated")
        return _utf8(name, unit, instrument, namespace, suffixes)
    translated = _with_suffixes(name, unit, instrument, namespace) if suffixes else _without_suffixes(name, namespace)
    if not translated.strip("_"):
        raise ValueError(f"the collector cannot translate the metric name {name!r} (it has no letter or digit)")
    return translated


def prometheus_series(
    name: str,
    unit: str = "",
    instrument: Instrument = "gauge",
    namespace: str = "",
    suffixes: bool = True,
    escape: bool = True,
) -> tuple[str, ...]:
    """Every sample name the collector writes for the instrument: a histogram's ``_bucket``, ``_sum`` and ``_count``,
    otherwise the one name of :func:`prometheus_name`."""
    base = prometheus_name(name, unit, instrument, namespace, suffixes, escape)
    if instrument == "histogram":
        return (f"{base}_bucket", f"{base}_sum", f"{base}_count")
    return (base,)


def metric_kind(instrument: Instrument) -> MetricKind:
    """How the bridge reads the instrument's series: an ``up_down_counter`` goes up and down, so it is a gauge."""
    return _KINDS[instrument]


#: How a served name reaches a store (see the module docstring, "Stored forms").
NameForm = Literal["served", "escaped", "ray"]
NAME_FORMS: Final[tuple[NameForm, ...]] = ("served", "escaped", "ray")
_NOT_ESCAPED: Final = re.compile(r"[^a-zA-Z0-9_]")


def stored_name(name: str, form: NameForm) -> str:
    """``name`` (a sample name as its exporter serves it) in ``form``: ``vllm:x_total`` is ``vllm_x_total`` escaped
    and ``ray_vllm_x_total`` through Ray's metrics agent."""
    if form == "served":
        return name
    escaped = _NOT_ESCAPED.sub("_", name)
    return f"ray_{escaped}" if form == "ray" else escaped


def name_forms(name: str) -> tuple[NameForm, ...]:
    """The forms a store may hold ``name`` under: all of :data:`NAME_FORMS` for a name escaping changes (one with a
    ``:``), only ``served`` for any other (``node_load1`` is ``node_load1`` however it is scraped)."""
    return NAME_FORMS if _NOT_ESCAPED.search(name) else ("served",)
