"""BASELINE (not otel-bridge): the per-metric sequential Prometheus client that otel-bridge replaces.

This is the upstream approach described in ``/work/shared/DESIGN.md`` ("a client that queries Prometheus one metric
at a time, blocks the training loop"): at every step the trainer thread asks for each configured metric with one
blocking instant query ``GET /api/v1/query?query=<metric>``, keeps one value per metric (the first series), and caches
each metric's value for ``cache_ttl_s`` (10 s) so that most steps are served from the cache. It exists only to be
measured against in the same run; nothing in ``otel_bridge`` uses it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import requests


class SequentialPrometheusClient:
    """One blocking instant query per metric, on the caller's thread, with a per-metric cache of ``cache_ttl_s``."""

    def __init__(self, url: str, metrics: Sequence[str], *, cache_ttl_s: float = 10.0, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.metrics = list(metrics)
        self.cache_ttl_s = cache_ttl_s
        self.timeout_s = timeout_s
        self.requests_sent = 0
        self._session = requests.Session()
        self._cache: dict[str, tuple[float, float | None]] = {}

    def _query(self, metric: str) -> float | None:
        self.requests_sent += 1
        response = self._session.get(f"{self.url}/api/v1/query", params={"query": metric}, timeout=self.timeout_s)
        response.raise_for_status()
        result = response.json()["data"]["result"]
        return float(result[0]["value"][1]) if result else None  # "first series wins", as upstream does

    def metrics_for_step(self) -> dict[str, float]:
        """The values to log for this step: cached when younger than ``cache_ttl_s``, else queried (blocking)."""
        now = time.monotonic()
        out: dict[str, float] = {}
        for metric in self.metrics:
            cached = self._cache.get(metric)
            if cached is None or now - cached[0] >= self.cache_ttl_s:
                cached = (now, self._query(metric))
                self._cache[metric] = cached
            if cached[1] is not None:
                out[metric] = cached[1]
        return out

    def close(self) -> None:
        """Close the HTTP session."""
        self._session.close()


def instant_query_names(metrics: Sequence[dict[str, str]]) -> list[str]:
    """What the baseline queries for each configured metric: the name itself, ``<name>_sum`` for histograms."""
    return [m["name"] + ("_sum" if m.get("type") == "histogram" else "") for m in metrics]
