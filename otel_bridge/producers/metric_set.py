"""The configured metrics, resolved: presets expanded, deprecated names replaced, statistics defaulted."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from otel_bridge.config import DEFAULT_MAX_GROUPS, MetricConfig
from otel_bridge.errors import ConfigError
from otel_bridge.producers.presets import DEPRECATED, PRESETS, replacement_text
from otel_bridge.prometheus_names import NameForm, is_classic_name, metric_kind, name_forms, stored_name
from otel_bridge.window import DEFAULT_STATS, MetricKind, allowed_stats, is_valid_stat

_log = logging.getLogger(__name__)

Aggregation = Literal["sum", "mean", "max", "min"]
HistogramStorage = Literal["classic", "native", "both"]
"""How a store holds a histogram: classic series (``x_bucket``, ``x_sum``, ``x_count``), one native series per label
set named ``x`` (a native histogram; Prometheus 3's ``convert_classic_histograms_to_nhcb`` makes one of each classic
histogram it scrapes), or both."""
ROLE_LABEL = "role"
"""The label a series' role (``roles`` in the configuration) is given, for ``by: [role]``."""
RoleMap = Mapping[str, Sequence[Mapping[str, str]]]


@dataclass(frozen=True, slots=True)
class MetricQuery:
    """One metric to read each step, fully resolved.

    ``kind`` is ``None`` until known: metrics configured without ``type`` get it from the source's metadata at start-up
    (:meth:`with_kind`). ``promql`` queries are raw expressions; ``ratio`` queries divide two counters' deltas.
    ``scale`` multiplies every statistic (a unit conversion); ``full_scale`` is a gauge's value when the device it
    measures is fully busy (values outside ``[0, full_scale]`` are impossible), ``busy_at`` a count's value from which
    the server is fully busy (values above it are held to it): the ``idle_seconds`` statistic needs one of them
    (:attr:`idle_scale`). ``roles`` (set when ``by`` holds
    :data:`ROLE_LABEL` and roles are configured) are ``(role, label set)`` pairs: a series gets the ``role`` label of
    every role one of whose label sets it carries (:meth:`roles_of`).
    """

    key_name: str
    name: str | None = None
    kind: MetricKind | None = None
    stats: tuple[str, ...] = ()
    by: tuple[str, ...] = ()
    agg: Aggregation = "sum"
    matchers: tuple[tuple[str, str], ...] = ()
    promql: str | None = None
    ratio: tuple[str, str] | None = None
    scale: float = 1.0
    full_scale: float | None = None
    busy_at: float | None = None
    roles: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    source_index: int = field(default=0, compare=False)
    max_groups: int = DEFAULT_MAX_GROUPS
    """The most label groups this metric adds to one record (``max_groups``): the rest are folded
    (:func:`~otel_bridge.producers.statistics.bound_groups`)."""
    utf8: bool = False
    """An ``otlp:`` entry whose translation strategy keeps dots: :attr:`name` may be a UTF-8 name, quoted in
    selectors (``{"trainer.tokens_total"}``) and refused on a store without UTF-8 names."""
    stored_as: HistogramStorage = "classic"
    """How the store holds this histogram (:data:`HistogramStorage`), found at the PromQL path's start-up. With
    ``both``, a native series is read only where no classic ``_count`` series has its labels: never counted twice."""
    forms: tuple[NameForm, ...] = ("served",)
    """The forms the store holds this query's names under (:func:`~otel_bridge.prometheus_names.stored_name`), found
    at start-up: every form is read, each series once (:meth:`stored`); records keep :attr:`key_name` whatever the
    form."""

    @property
    def native_name(self) -> str | None:
        """The name of this histogram's native series, when the store holds it natively (``None`` otherwise)."""
        if self.kind == "histogram" and self.ratio is None and self.name is not None and self.stored_as != "classic":
            return self.name
        return None

    @property
    def bucket_names(self) -> tuple[str, ...]:
        """The sample names whose series carry an ``le`` label: a classic histogram's ``_bucket`` (cumulative counts)
        and, held natively, its native name (each bucket's own count:
        :func:`~otel_bridge.producers.statistics.native_series`)."""
        if self.kind != "histogram" or self.ratio is not None or self.name is None:
            return ()
        return (f"{self.name}_bucket", *((self.name,) if self.native_name else ()))

    def read_names(self) -> tuple[str, ...]:
        """The sample names this query's raw series come under: :meth:`series_names`, and the native name of a
        histogram the store holds natively."""
        return (*self.series_names(), *((self.native_name,) if self.native_name else ()))

    @property
    def candidate_forms(self) -> tuple[NameForm, ...]:
        """The forms a store may hold this query's names under (:func:`~otel_bridge.prometheus_names.name_forms`):
        only ``served`` for raw PromQL and UTF-8 names."""
        if self.promql is not None or self.utf8:
            return ("served",)
        names = self.ratio if self.ratio is not None else (self.name,) if self.name is not None else ()
        return name_forms("".join(names)) if names else ("served",)

    def stored(self, name: str) -> tuple[str, ...]:
        """The names sample name ``name`` (one of :meth:`read_names`: a native histogram's name too) is read under: one
        per form in :attr:`forms`."""
        return tuple(stored_name(name, form) for form in self.forms)

    def served_name(self, stored: str) -> str | None:
        """The sample name of this query (:meth:`read_names`) that the store holds as ``stored`` (under one of
        :attr:`forms`), if any."""
        for name in self.read_names():
            if stored in self.stored(name):
                return name
        return None

    @property
    def utf8_names(self) -> tuple[str, ...]:
        """The sample names this query reads that only a store with UTF-8 names holds."""
        return tuple(n for n in self.series_names() if not is_classic_name(n)) if self.utf8 else ()

    @property
    def entry(self) -> str:
        """How messages name the entry this query comes from: ``metrics[3]``, or, for a query no config entry made
        (``source_index`` -1: ``otel-bridge query EXPR``), ``the queried expression``."""
        return f"metrics[{self.source_index}]" if self.source_index >= 0 else "the queried expression"

    @property
    def needs_kind(self) -> bool:
        """A plain metric whose type is still unknown."""
        return self.name is not None and self.kind is None

    def with_kind(self, kind: MetricKind) -> MetricQuery:
        """This query with its type resolved (and default statistics when none were configured)."""
        stats = self.stats or DEFAULT_STATS[kind]
        bad = [s for s in stats if not is_valid_stat(kind, s)]
        if bad:
            raise ConfigError(
                f"{self.entry} {self.name}: the source says it is a {kind}, and stats {bad} are not "
                f"valid for a {kind}; allowed: {allowed_stats(kind)}"
            )
        return replace(self, kind=kind, stats=stats)

    @property
    def idle_scale(self) -> float | None:
        """The value of a fully busy device for ``idle_seconds``: ``busy_at``, else ``full_scale``."""
        return self.busy_at if self.busy_at is not None else self.full_scale

    def series_names(self) -> tuple[str, ...]:
        """The Prometheus sample names this query reads raw (counters, histograms, ratios)."""
        if self.ratio is not None:
            return self.ratio
        if self.name is None:
            return ()
        if self.kind == "histogram":
            return (f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count")
        return (self.name,)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a series' labels satisfy this query's equality matchers."""
        return all(labels.get(k) == v for k, v in self.matchers)

    def roles_of(self, labels: Mapping[str, str]) -> list[str]:
        """The roles a series with ``labels`` serves, in configuration order (each once)."""
        found: list[str] = []
        for role, label_set in self.roles:
            if role not in found and all(labels.get(k) == v for k, v in label_set):
                found.append(role)
        return found


def resolve_metrics(
    configs: Sequence[MetricConfig], roles: RoleMap | None = None, max_groups: int = DEFAULT_MAX_GROUPS
) -> list[MetricQuery]:
    """Expand presets and deprecated names into :class:`MetricQuery` objects, rejecting duplicate keys; queries
    grouped ``by`` :data:`ROLE_LABEL` get the configured ``roles``; ``max_groups`` (the top-level key) bounds the
    label groups of every metric whose entry does not set its own."""
    queries = _resolve(configs, max_groups)
    if roles:
        pairs = tuple((role, tuple(sorted(labels.items()))) for role, sets in roles.items() for labels in sets)
        queries = [replace(q, roles=pairs) if ROLE_LABEL in q.by else q for q in queries]
    return queries


def _resolve(configs: Sequence[MetricConfig], max_groups: int) -> list[MetricQuery]:
    queries: list[MetricQuery] = []
    for index, config in enumerate(configs):
        if config.preset is not None:
            preset = PRESETS.get(config.preset)
            if preset is None:
                raise ConfigError(
                    f"metrics[{index}]: unknown preset {config.preset!r}; available: {', '.join(sorted(PRESETS))}"
                )
            for entry in preset:
                own = list(entry.get("by", []))
                merged = {**entry, "by": own + [label for label in config.by if label not in own]}
                if config.labels:
                    merged["labels"] = {**entry.get("labels", {}), **config.labels}
                if "agg" in config.model_fields_set and entry.get("type") == "gauge":
                    merged["agg"] = config.agg
                if config.max_groups is not None:
                    merged["max_groups"] = config.max_groups
                queries.append(_query(MetricConfig.model_validate(merged), index, max_groups))
        else:
            queries.append(_query(config, index, max_groups))
    _reject_duplicates(queries)
    return queries


def _query(config: MetricConfig, index: int, max_groups: int) -> MetricQuery:
    if config.name is not None and config.name in DEPRECATED:
        config = _replace_deprecated(config, index)
    stats = tuple(config.stats) if config.stats is not None else ()
    if config.type is not None and not stats:
        stats = DEFAULT_STATS[config.type]
    common = {
        "by": tuple(config.by),
        "agg": config.agg,
        "matchers": tuple(sorted(config.labels.items())),
        "scale": config.scale if config.scale is not None else 1.0,
        "full_scale": config.full_scale,
        "busy_at": config.busy_at,
        "source_index": index,
        "max_groups": config.max_groups if config.max_groups is not None else max_groups,
    }
    if config.promql is not None:
        assert config.alias is not None
        return MetricQuery(key_name=config.alias, promql=config.promql, **common)  # type: ignore[arg-type]
    if config.ratio is not None:
        assert config.alias is not None
        ratio = (config.ratio.numerator, config.ratio.denominator)
        return MetricQuery(key_name=config.alias, ratio=ratio, kind="counter", **common)  # type: ignore[arg-type]
    if config.otlp is not None:
        name = config.otlp.prometheus_name
        _log.debug("metrics[%d]: OpenTelemetry instrument %s is %s in Prometheus", index, config.otlp.name, name)
        kind = metric_kind(config.otlp.instrument)
        stats = stats or DEFAULT_STATS[kind]
        utf8 = not config.otlp.escaped
        return MetricQuery(key_name=config.alias or name, name=name, kind=kind, stats=stats, utf8=utf8, **common)  # type: ignore[arg-type]
    assert config.name is not None
    return MetricQuery(
        key_name=config.alias or config.name,
        name=config.name,
        kind=config.type,
        stats=stats,
        **common,  # type: ignore[arg-type]
    )


def _replace_deprecated(config: MetricConfig, index: int) -> MetricConfig:
    assert config.name is not None
    old = config.name
    new = dict(DEPRECATED[old])
    _log.warning(
        "metrics[%d]: %s is a deprecated vLLM metric (removed in vLLM 0.32); querying %s instead - "
        "update your config to the new name",
        index,
        old,
        replacement_text(old),
    )
    kind = new.get("type")
    if config.stats and "stats" not in new and kind is not None:
        bad = [s for s in config.stats if not is_valid_stat(kind, s)]
        if bad:
            raise ConfigError(
                f"metrics[{index}] {old} is replaced by {new['name']}, a {kind}: stats {bad} are not valid for it; "
                f"allowed: {allowed_stats(kind)}"
            )
        new["stats"] = list(config.stats)
    new.update({"by": list(config.by), "agg": config.agg, "labels": dict(config.labels)})
    if config.alias is not None:
        new["alias"] = config.alias
    return MetricConfig.model_validate(new)


def _reject_duplicates(queries: Iterable[MetricQuery]) -> None:
    seen: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
    for query in queries:
        key = (query.key_name, query.matchers)
        if key in seen:
            raise ConfigError(
                f"metrics[{query.source_index}]: {query.key_name} is configured twice (also metrics[{seen[key]}]); "
                "remove one or give one an alias"
            )
        seen[key] = query.source_index
