"""What the PromQL path talks to: which store, which version, and what its query language can do for the bridge.

Read once at start-up from the store's own API and from probe queries, never guessed from a version string (Grafana
Mimir and VictoriaMetrics answer ``/api/v1/status/buildinfo`` with a Prometheus version of their choosing):

- ``/api/v1/status/buildinfo``: the version; Grafana Mimir adds ``"application": "Grafana Mimir"``;
- ``/flags``: VictoriaMetrics lists its command-line flags there (``-search.maxQueryLen``, ...), Prometheus serves its
  web UI; a gateway in front of a store may answer it too, so the claim is confirmed by behaviour: VictoriaMetrics is
  the store that evaluates MetricsQL (a ``WITH`` template, which PromQL has not), and a disagreement is a WARNING at
  start-up;
- ``/api/v1/features`` (Prometheus 3.9 and later): ``promql.anchored`` and the rest of what it supports;
- probe queries over a name no series has (they cost nothing), for what a store does not list: an ``anchored`` range
  selector (Prometheus 3.7 and later, always on since 3.x with ``/api/v1/features``), a quoted UTF-8 metric name
  (``{"a.b"}``, Prometheus 3.0 and later).

What differs and how the bridge handles it:

- **An exact window increase in one function**: Prometheus' ``increase(x[w] anchored)`` takes the last sample at or
  before the range's start (within the lookback delta) and the last one in it, corrects counter resets and does not
  extrapolate, which is the bridge's own definition of a counter's delta; MetricsQL's ``increase(x[w])``
  (VictoriaMetrics) does the same by default. Without it the bridge sums each boundary's samples and re-reads the
  targets that reset (:mod:`otel_bridge.producers.promql._internal.plan`).
- **VictoriaMetrics** evaluates a query near the present at ``now - search.latencyOffset`` (30 s by default) unless
  asked not to (``nocache=1``, sent with every query), makes a written sample queryable up to
  :data:`VICTORIAMETRICS_FLUSH_S` later (its pending rows are flushed at a 2 s tick once 2 s have passed since the
  last flush, so a row can wait two ticks: ``lib/storage/raw_row.go``, ``partition.go``), and
  refuses queries longer than ``search.maxQueryLen`` (16 KiB by default), so the step's union is sent in parts under
  that size.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from otel_bridge.errors import PrometheusAPIError, PrometheusResponseError
from otel_bridge.prometheus.client import PrometheusClient

_log = logging.getLogger(__name__)

_PROBE_NAME = "otel_bridge_probe_no_series_has_this_name"
_VICTORIAMETRICS_PARAMS = (("nocache", "1"),)
VICTORIAMETRICS_FLUSH_S = 4.5
"""How long after it is written VictoriaMetrics may take to answer with a sample: two pending-rows flush ticks (2 s
each) and a margin. Measured on v1.151.0 scraping every second: the newest sample a query saw was up to 4.35 s old."""
VICTORIAMETRICS_MAX_QUERY_BYTES = 16 * 1024
"""``-search.maxQueryLen``'s default: the longest query VictoriaMetrics accepts unless started with more."""

IncreaseForm = Literal["anchored", "metricsql"]
"""How a store writes a window's exact increase: ``increase(x[w] anchored)`` or MetricsQL's ``increase(x[w])``."""


@dataclass(frozen=True, slots=True)
class Store:
    """A store behind ``prometheus.url`` and what the bridge's plans may use of it (see the module docstring)."""

    product: str
    version: str
    increase: IncreaseForm | None = None
    utf8_names: bool = False
    query_params: tuple[tuple[str, str], ...] = ()
    max_query_bytes: int | None = None
    max_query_setting: str = "the store's longest query"
    """What sets :attr:`max_query_bytes`, as an operator changes it (``VictoriaMetrics' -search.maxQueryLen``)."""
    storing_delay_s: float = 0.0
    first_over_time: bool = False
    """Whether the store evaluates ``first_over_time`` (Prometheus 3.14 and later; earlier 3.x behind
    ``--enable-feature=promql-experimental-functions``): what closes the run's last window of a native histogram."""
    rules: str | None = None
    """Why the store cannot run otel-bridge's recording rules (``None``: it may, as Prometheus does)."""
    clock: str | None = None
    """Why the store's clock cannot be read through ``time()`` (``None``: an instant query of ``time()`` without a
    time answers its clock now, as Prometheus' does)."""
    known_from_sources: bool = False
    """What the bridge knows of this product comes from its sources and documentation, not from a test here."""
    notes: tuple[str, ...] = field(default=())

    @property
    def name(self) -> str:
        """``"Prometheus 3.16.0"``, ``"VictoriaMetrics (answers as Prometheus 2.24.0)"``, ..."""
        return f"{self.product} {self.version}".strip() if self.version else self.product

    def exact_increase(self, selector: str, length: str, at: str, *, present: str | None = None) -> str:
        """The expression of ``selector``'s exact increase over ``length`` ending at ``at`` (PromQL text); a
        ``ValueError`` for a store without one (:attr:`increase` is ``None``).

        A series with no sample inside the range has no increase there: ``increase()`` answers nothing for it (both
        stores). With ``present`` (a range), the series with a sample within ``present`` before ``at`` are added with
        0, so a window shorter than the scrape interval keeps its keys; longer windows hold a sample of every live
        series and need not pay for it."""
        if self.increase == "anchored":
            increase = f"increase({selector}[{length}] anchored @ {at})"
        elif self.increase == "metricsql":
            increase = f"increase({selector}[{length}] @ {at})"
        else:
            raise ValueError(f"{self.name} has no exact window increase")
        if present is None:
            return increase
        return f"({increase} or 0 * last_over_time({selector}[{present}] @ {at}))"


def detect_store(client: PrometheusClient) -> Store:
    """Ask the store at ``client.url`` what it is (see the module docstring); the query parameters it needs
    (:attr:`Store.query_params`) are added to ``client``. An unreachable store raises as any query would."""
    info = _optional(client.buildinfo) or {}
    version = str(info.get("version", ""))
    flags = client.flags()
    disagreement: tuple[str, ...] = ()
    if flags is not None and not _parses(client, _metricsql_only):
        disagreement = (
            "/flags answers with a list of flags, as VictoriaMetrics does, but the store does not evaluate MetricsQL: "
            "something in front of it (a gateway, a proxy) answers that path; taken for what its answers say it is",
        )
        _log.warning("%s: %s", client.url, disagreement[0])
        flags = None
    if flags is not None:
        store = _victoria_metrics(client, flags)
    else:
        features = _optional(client.features)
        application = str(info.get("application", ""))
        if "mimir" in application.lower():
            store = Store(
                "Grafana Mimir",
                version,
                increase="anchored" if _promql_feature(features, "anchored") or _parses(client, _anchored) else None,
                utf8_names=_parses(client, _utf8_name),
                first_over_time=_parses(client, _first_over_time),
                known_from_sources=True,
                notes=(
                    "no /api/v1/targets: windows are bounded by its samples; give prometheus.scrape_interval_s",
                    "multi-tenant: set the X-Scope-OrgID header through a proxy in front of prometheus.url",
                ),
            )
        else:
            store = Store(
                "Prometheus",
                version,
                increase="anchored" if _promql_feature(features, "anchored") or _parses(client, _anchored) else None,
                utf8_names=_parses(client, _utf8_name),
                first_over_time=_parses(client, _first_over_time),
            )
    if disagreement:  # said by doctor too
        store = replace(store, notes=(*store.notes, *disagreement))
    _log.info(
        "%s at %s: window increases by %s, UTF-8 metric names %s",
        store.name,
        client.url,
        f"increase() ({store.increase})" if store.increase else "the samples at each boundary",
        "quoted" if store.utf8_names else "not supported",
    )
    return store


def _victoria_metrics(client: PrometheusClient, flags: Mapping[str, str]) -> Store:
    client.add_query_params(_VICTORIAMETRICS_PARAMS)  # before the probes: they are queries too
    try:
        max_bytes = int(flags.get("search.maxQueryLen", str(VICTORIAMETRICS_MAX_QUERY_BYTES)))
    except ValueError:
        max_bytes = VICTORIAMETRICS_MAX_QUERY_BYTES
    return Store(
        "VictoriaMetrics",
        "",
        increase="metricsql" if _parses(client, _metricsql_increase) else None,
        query_params=_VICTORIAMETRICS_PARAMS,
        utf8_names=_parses(client, _utf8_name),
        max_query_bytes=max_bytes,
        max_query_setting="VictoriaMetrics' -search.maxQueryLen",
        storing_delay_s=VICTORIAMETRICS_FLUSH_S,
        clock=(
            "VictoriaMetrics answers an instant query without a time at now less its -search.latencyOffset (time() "
            "was 30 s behind its clock with the defaults)"
        ),
        rules=(
            "VictoriaMetrics runs no recording rules itself (vmalert evaluates them and writes the results back, on "
            "its own schedule; without -vmalert.proxyURL its /api/v1/rules answers an empty list), and it needs none "
            "here: each window's increase is one MetricsQL increase() per metric"
        ),
        notes=(
            "queries carry nocache=1 (else it reads near-present times at now - search.latencyOffset)",
            f"the step's query is sent in parts of at most {max_bytes} bytes (search.maxQueryLen)",
        ),
    )


def _anchored() -> str:
    return f"increase({_PROBE_NAME}[1m] anchored @ 0)"


def _metricsql_increase() -> str:
    return f"increase({_PROBE_NAME}[1m] @ 0)"


def _metricsql_only() -> str:
    return f"WITH (otel_bridge_probe = {_PROBE_NAME}) otel_bridge_probe"


def _first_over_time() -> str:
    return f"first_over_time({_PROBE_NAME}[1m] @ 0)"


def _utf8_name() -> str:
    return '{"otel_bridge.probe"}'


def _parses(client: PrometheusClient, probe: Callable[[], str]) -> bool:
    """Whether the store accepts the probe query (it matches no series: the answer is empty either way)."""
    try:
        client.query(probe())
    except PrometheusAPIError as exc:
        if exc.error_type == "bad_data" or exc.status_code in (400, 422):
            return False
        raise
    return True


def _promql_feature(features: Mapping[str, Any] | None, name: str) -> bool:
    promql = features.get("promql") if features else None
    return isinstance(promql, dict) and promql.get(name) is True


def _optional(call: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
    """``call()``, or ``None`` when the store has no such endpoint (an error answer, or something that is not JSON)."""
    try:
        return call()
    except (PrometheusAPIError, PrometheusResponseError):
        return None
