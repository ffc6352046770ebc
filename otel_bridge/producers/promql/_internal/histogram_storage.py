"""How the store holds each configured histogram, found once at start-up: classic series, native ones, or both.

A classic histogram is three kinds of series (``x_bucket`` per bound, ``x_sum``, ``x_count``); a native histogram is one
series named ``x`` whose every sample holds the buckets, sum and count. Prometheus 3 stores a scraped classic histogram
as one native series with custom buckets (NHCB) when the scrape config (or its ``global`` section) sets
``convert_classic_histograms_to_nhcb: true``, and then keeps the classic series too only with
``always_scrape_classic_histograms: true``; a store may also hold native histograms sent natively (remote write,
OTLP). Asked per histogram at start-up, over the store's lookback and under each name form the store holds its family
under (found first: :mod:`.stored_names`): a classic ``x_count`` series and a native series named ``x``
(``histogram_count(x)`` answers only for native samples): Prometheus 3 converting Ray's agent names stores vLLM's
``vllm:x`` as the native series ``ray_vllm_x`` (docs/compatibility.md, "Native histograms"). Found both ways, the
histogram is read once per label set (:attr:`~otel_bridge.producers.metric_set.MetricQuery.stored_as`); found neither
way (nothing stored yet), it is read as classic. A store that does not evaluate ``histogram_count`` holds no native
histograms. A histogram that a window finds no series of is asked again (:class:`~.store_reader.StoreReader`): one
whose servers came up after the bridge, or a store whose conversion was switched on or off, is read as it is stored
from the next window on.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

from otel_bridge.errors import PrometheusAPIError
from otel_bridge.producers.metric_set import HistogramStorage, MetricQuery
from otel_bridge.prometheus import promql
from otel_bridge.prometheus.client import PrometheusClient
from otel_bridge.prometheus_names import stored_name

__all__ = ["with_histogram_storage"]

_log = logging.getLogger(__name__)

_STORAGE_LABEL = "otel_bridge_storage"
_NAME_FORM_LABEL = "otel_bridge_name_form"
_INDEX_LABEL = "otel_bridge_q"


def with_histogram_storage(
    client: PrometheusClient, queries: Sequence[MetricQuery], *, max_query_bytes: int | None = None
) -> list[MetricQuery]:
    """``queries`` with each histogram's :attr:`~MetricQuery.stored_as` as the store holds it now, asked under each of
    its stored name forms (:attr:`~MetricQuery.forms`: ``vllm_x`` may be a native series as ``vllm:x`` may), one
    query for all (split under ``max_query_bytes``); one found neither way keeps its own. Each change is logged (at
    start-up: the histograms held natively), and a native histogram held under two names at once is said to be read
    under the first name holding each server's series (:func:`~.plan.roled`)."""
    histograms = [i for i, q in enumerate(queries) if q.kind == "histogram" and q.ratio is None and q.name]
    if not histograms:
        return list(queries)
    parts = []
    for index in histograms:
        query = queries[index]
        assert query.name is not None
        matchers = dict(query.matchers)
        for form in query.forms:
            classic = promql.selector(stored_name(query.series_names()[-1], form), matchers, utf8=query.utf8)
            native = promql.selector(stored_name(query.name, form), matchers, utf8=query.utf8)
            for storage, expr in (("classic", f"group({classic})"), ("native", f"group(histogram_count({native}))")):
                tagged = promql.tag_series(expr, _STORAGE_LABEL, storage)
                tagged = promql.tag_series(promql.tag_series(tagged, _NAME_FORM_LABEL, form), _INDEX_LABEL, str(index))
                parts.append(tagged)
    try:
        series = [s for expr in promql.packed_unions(parts, max_query_bytes) for s in client.query(expr).series]
    except PrometheusAPIError as exc:
        if exc.error_type not in ("bad_data", "400") and exc.status_code not in (400, 422):
            raise
        _log.info("%s does not evaluate histogram_count(): every histogram is read as classic series", client.url)
        return list(queries)
    found: dict[int, set[str]] = {}
    native_forms: dict[int, set[str]] = {}
    for one in series:
        tag, storage = one.labels.get(_INDEX_LABEL, ""), one.labels.get(_STORAGE_LABEL, "")
        if tag.isdigit() and storage:
            found.setdefault(int(tag), set()).add(storage)
            if storage == "native":
                native_forms.setdefault(int(tag), set()).add(one.labels.get(_NAME_FORM_LABEL, ""))
    for index, forms in native_forms.items():
        if len(forms) > 1:
            _log.warning(
                "%s (%s) is stored as a native histogram under %d names at once (%s): a server whose native series "
                "changed names within a window is read under the first of them there, not summed across the change",
                queries[index].key_name,
                queries[index].entry,
                len(forms),
                ", ".join(sorted(forms)),
            )
    resolved = list(queries)
    for index in histograms:
        storages = found.get(index, set())
        if not storages:
            continue
        stored: HistogramStorage = "both" if len(storages) == 2 else "native" if storages == {"native"} else "classic"
        if stored != queries[index].stored_as:
            resolved[index] = dataclasses.replace(queries[index], stored_as=stored)
            _log.info(
                "%s (%s) is stored at %s %s", queries[index].key_name, queries[index].entry, client.url, _SAID[stored]
            )
    return resolved


_SAID: dict[HistogramStorage, str] = {
    "classic": "as classic series (_bucket, _sum, _count): read from them",
    "native": "as a native histogram: read from its native series",
    "both": (
        "as a native histogram and as classic series: read from the classic ones, and from the native ones where no "
        "classic series has their labels (never counted twice)"
    ),
}
