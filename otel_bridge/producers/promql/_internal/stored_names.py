"""The form the store holds each configured family under (``vllm:x``, ``vllm_x``, ``ray_vllm_x``:
:func:`otel_bridge.prometheus_names.stored_name`), found once at start-up (:func:`find_forms`).

A family is read under every form the store holds it by, each series once (:func:`~.plan.roled`): a family with
series under two forms (a migration from one way of scraping to another, or servers reached two ways) is summed over
its servers, and a server's series under both forms within a window is read as one series. A family with no series
under any form yet is read under all of them, so whichever form its servers appear under later is read.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.prometheus import promql
from otel_bridge.prometheus.client import PrometheusClient
from otel_bridge.prometheus_names import stored_name

__all__ = ["find_forms", "probe_names"]

_log = logging.getLogger(__name__)

LOOKBACK_S = 300.0
"""How far back a form's series count as held: Prometheus' default lookback (``--query.lookback-delta``), so a form
whose series stopped shortly before start-up (a change of scrape settings) is read beside the new one."""
_TAG = "otel_bridge_name"


def probe_names(query: MetricQuery) -> tuple[str, ...]:
    """The sample names whose series prove the family is there: a ratio's two counters, a histogram's ``_count`` and
    its name (a native histogram's one series: Prometheus 3's ``convert_classic_histograms_to_nhcb`` stores no
    ``_count``), a type not known yet the name and its ``_count``, else the name."""
    if query.ratio is not None:
        return query.ratio
    if query.name is None:
        return ()
    if query.kind in ("histogram", None):
        return (query.name, f"{query.name}_count")
    return (query.name,)


def find_forms(
    client: PrometheusClient, queries: Sequence[MetricQuery], *, max_query_bytes: int | None = None
) -> list[MetricQuery]:
    """``queries`` with :attr:`~MetricQuery.forms` set to the forms the store holds their families under: those
    with a series in the last :data:`LOOKBACK_S` (``count_over_time``: a native histogram's samples count too; one
    query for all of them, in as few as a store that refuses queries longer than ``max_query_bytes`` takes), every
    candidate form when none has; logged for every family not held as served alone."""
    candidates = {i: q.candidate_forms for i, q in enumerate(queries) if len(q.candidate_forms) > 1}
    names = sorted(
        {stored_name(p, f) for i, forms in candidates.items() for p in probe_names(queries[i]) for f in forms}
    )
    if not names:
        return list(queries)
    lookback = promql.duration(LOOKBACK_S)
    parts = [promql.tag_series(f"group(count_over_time({promql.selector(n)}[{lookback}]))", _TAG, n) for n in names]
    held = {
        s.labels.get(_TAG, "")
        for expr in promql.packed_unions(parts, max_query_bytes)
        for s in client.query(expr).series
    }
    found: list[MetricQuery] = []
    said: set[tuple[tuple[str, ...], tuple[str, ...]]] = set()
    for index, query in enumerate(queries):
        forms = candidates.get(index)
        if forms is None:
            found.append(query)
            continue
        probes = probe_names(query)
        held_forms = tuple(f for f in forms if any(stored_name(p, f) in held for p in probes))
        resolved = replace(query, forms=held_forms or forms)
        found.append(resolved)
        families = query.ratio if query.ratio is not None else (query.name or "",)
        stored = tuple(n for family in families for n in resolved.stored(family))
        if (families, stored) in said or held_forms == ("served",):
            continue
        said.add((families, stored))
        what = " and ".join(families)
        if not held_forms:
            _log.info(
                "%s (%s): no series under any of its names yet (%s): read under each of them, so whichever its "
                "servers appear under is read",
                what,
                query.entry,
                ", ".join(stored),
            )
        elif len(held_forms) == 1:
            _log.info(
                "%s (%s) is stored as %s: read under that name, recorded as %s",
                what,
                query.entry,
                " and ".join(stored),
                query.key_name,
            )
        else:
            _log.info(
                "%s (%s) is stored under %d names at once (%s): read under each, summed over its servers, a "
                "server's series under two names read as one; recorded as %s",
                what,
                query.entry,
                len(held_forms),
                ", ".join(stored),
                query.key_name,
            )
    return found
