"""Reading the answers of the Prometheus HTTP API: the JSON envelope, query results, and what an answer that is not
the API (an HTML page, a proxy's error, cut-off JSON) is reported as."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from otel_bridge.errors import PrometheusAPIError, PrometheusResponseError
from otel_bridge.http.transport import Answer, one_line, truncate

__all__ = [
    "NativeHistogram",
    "PromSeries",
    "QueryResult",
    "api_error",
    "decode_envelope",
    "is_str_dict",
    "parse_query_data",
    "shape_error",
]

_log = logging.getLogger(__name__)

#: How much of a query a message quotes.
QUERY_IN_MESSAGE = 200
_SNIPPET_CHARS = 120
_RESULT_TYPES = ("vector", "scalar", "matrix", "string")
_AUTH_KEYS = (
    "prometheus.auth.bearer_token_env / prometheus.auth.bearer_token_file, or prometheus.auth.username with "
    "prometheus.auth.password_env / prometheus.auth.password_file"
)

# Prefixed to the "is prometheus.url ...?" question of responses that are not the Prometheus API.
_STATUS_HINTS = {
    401: f"the server refused the credentials (check {_AUTH_KEYS}); ",
    403: f"the server refused the credentials (check {_AUTH_KEYS}); ",
    404: "the API path does not exist there (include the path prefix if Prometheus runs behind one); ",
}

_API_ERROR_HINTS = {
    "bad_data": "fix the PromQL expression or the request parameters",
    "execution": "the query failed while being evaluated (e.g. too many samples); narrow or fix it",
    "timeout": "the query ran longer than Prometheus' --query.timeout; narrow it (fewer series, shorter "
    "range) or raise that limit",
    "canceled": "Prometheus canceled the query (shutting down or overloaded); try again later",
    "unavailable": "Prometheus is not ready to serve queries (starting up or overloaded); try again later",
    "internal": "Prometheus hit an internal error; check the Prometheus server logs",
}


@dataclass(frozen=True, slots=True)
class NativeHistogram:
    """One native-histogram sample as the API answers it: its ``count``, ``sum`` and non-empty ``buckets``, each
    ``(lower, upper, count)`` (Prometheus leaves empty buckets out; a custom-bucket histogram's lowest bucket starts at
    ``-inf``, its highest ends at ``+inf``)."""

    count: float
    sum: float
    buckets: tuple[tuple[float, float, float], ...]


@dataclass(frozen=True, slots=True)
class PromSeries:
    """One series of a query result.

    ``labels`` includes ``__name__`` when Prometheus returns it; treat it as read-only. ``samples`` holds
    ``(unix seconds, value)`` pairs; a vector or scalar result has exactly one. ``histograms`` holds ``(unix seconds,
    native histogram)`` pairs, read only when the query asked for them (:func:`parse_query_data`'s
    ``native_histograms``); a series may hold both kinds in a range.
    """

    labels: Mapping[str, str]
    samples: tuple[tuple[float, float], ...]
    histograms: tuple[tuple[float, NativeHistogram], ...] = ()


@dataclass(frozen=True, slots=True)
class QueryResult:
    """The answer to an instant query: its ``resultType``, series and Prometheus' warnings.

    A scalar (and a numeric string) result is one series with empty labels.
    """

    result_type: Literal["vector", "scalar", "matrix", "string"]
    series: tuple[PromSeries, ...]
    warnings: tuple[str, ...] = ()


def decode_envelope(
    answer: Answer, url: str, expr: str | None, scrub: Callable[[str], str]
) -> tuple[Any, tuple[str, ...]]:
    """The ``data`` and ``warnings`` of a Prometheus API answer, or the typed error saying what it is instead."""
    status = answer.status
    body = answer.body
    content_type = answer.headers.get("Content-Type", "")
    described = f"HTTP {status}, {content_type or 'no Content-Type'}"
    status_hint = _STATUS_HINTS.get(status, "")
    if _looks_like_html(content_type, body):
        raise PrometheusResponseError(
            f"Prometheus at {url} answered with an HTML page ({described}): {_snippet(body, scrub)!r}; "
            f"{status_hint}is prometheus.url pointing at Prometheus and not at a proxy/Grafana login page?",
            url=url,
            status_code=status,
        )
    try:
        envelope = json.loads(body)
    except RecursionError:
        raise PrometheusResponseError(
            f"Prometheus at {url} answered with JSON nested too deeply to read ({described}); is prometheus.url "
            "pointing at Prometheus' HTTP API (and not at a proxy or another service)?",
            url=url,
            status_code=status,
        ) from None
    except ValueError as exc:
        looks_cut = body.lstrip()[:1] in (b"{", b"[")
        what = "JSON that ends early (truncated)" if looks_cut else "a body that is not JSON"
        raise PrometheusResponseError(
            f"Prometheus at {url} answered with {what} ({described}): {_snippet(body, scrub)!r}; "
            f"{status_hint}is prometheus.url pointing at Prometheus' HTTP API (and not at a proxy or "
            "another service)?",
            url=url,
            status_code=status,
        ) from exc
    state = envelope.get("status") if isinstance(envelope, dict) else None
    if state == "error":
        raise api_error(cast(dict[str, Any], envelope), status, url, expr)
    if state != "success" or "data" not in envelope or not 200 <= status < 300:
        raise PrometheusResponseError(
            f"Prometheus at {url} answered with JSON that is not a Prometheus API response "
            f"({described}): {_snippet(body, scrub)!r}; {status_hint}is prometheus.url the Prometheus "
            "base URL (e.g. http://host:9090, without /api/v1)?",
            url=url,
            status_code=status,
        )
    raw_warnings = envelope.get("warnings") or []
    if not isinstance(raw_warnings, list) or not all(isinstance(w, str) for w in raw_warnings):
        raise shape_error(url, "'warnings' is not a list of strings")
    for warning in raw_warnings:
        _log.info("Prometheus at %s warned: %s", url, truncate(warning, 300))
    return envelope["data"], tuple(raw_warnings)


def _snippet(body: bytes, scrub: Callable[[str], str]) -> str:
    """The first characters of ``body``, whitespace collapsed and any credential masked."""
    text = scrub(one_line(body[: _SNIPPET_CHARS * 4].decode("utf-8", errors="replace")))
    return truncate(text, _SNIPPET_CHARS)


def _looks_like_html(content_type: str, body: bytes) -> bool:
    if "html" in content_type.lower():
        return True
    head = body[:64].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html"))


def api_error(envelope: dict[str, Any], status: int, url: str, expr: str | None) -> PrometheusAPIError:
    error_type = envelope.get("errorType")
    error = envelope.get("error")
    error_type = error_type if isinstance(error_type, str) else "unknown"
    error = one_line(error) if isinstance(error, str) else "(no error message)"
    hint = _API_ERROR_HINTS.get(error_type, "see the error message")
    query = f"; query: {truncate(expr, QUERY_IN_MESSAGE)}" if expr is not None else ""
    _log.info("Prometheus at %s answered %s: %s (HTTP %d)", url, error_type, truncate(error, 300), status)
    return PrometheusAPIError(
        f"Prometheus at {url} answered {error_type}: {truncate(error, 500)} (HTTP {status}); {hint}{query}",
        url=url,
        status_code=status,
        error_type=error_type,
        error=error,
    )


def shape_error(url: str, detail: str) -> PrometheusResponseError:
    return PrometheusResponseError(
        f"Prometheus at {url} answered with JSON of an unexpected shape ({detail}); is prometheus.url "
        "pointing at Prometheus (or a compatible API) and not at another service?",
        url=url,
    )


def is_str_dict(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def parse_query_data(data: Any, warnings: tuple[str, ...], url: str, *, native_histograms: bool = False) -> QueryResult:
    """The answer of an instant query; native-histogram samples are read with ``native_histograms`` (into
    :attr:`PromSeries.histograms`), else refused as something otel-bridge does not read."""
    if not isinstance(data, dict) or data.get("resultType") not in _RESULT_TYPES or "result" not in data:
        raise shape_error(url, "'data' lacks a known 'resultType' and a 'result'")
    result_type = cast(Literal["vector", "scalar", "matrix", "string"], data["resultType"])
    result = data["result"]
    series: tuple[PromSeries, ...]
    if result_type in ("scalar", "string"):
        series = (PromSeries(labels={}, samples=(_parse_sample(result, url, result_type),)),)
    elif not isinstance(result, list):
        raise shape_error(url, f"a {result_type} 'result' is not a list")
    elif result_type == "vector":
        series = tuple(_parse_vector_series(item, url, native_histograms) for item in result)
    else:
        series = tuple(_parse_matrix_series(item, url, native_histograms) for item in result)
    return QueryResult(result_type=result_type, series=series, warnings=warnings)


def _parse_labels(item: Any, url: str) -> dict[str, str]:
    if not isinstance(item, dict):
        raise shape_error(url, "a series is not an object")
    labels = item.get("metric", {})
    if not is_str_dict(labels):
        raise shape_error(url, "a series' 'metric' is not an object of strings")
    return dict(labels)


def _reject_native_histograms(item: dict[str, Any], url: str) -> None:
    if "histogram" in item or "histograms" in item:
        raise PrometheusResponseError(
            f"Prometheus at {url} returned native-histogram samples, which otel-bridge does not read; wrap "
            "the expression in histogram_quantile(), histogram_sum() or histogram_count()",
            url=url,
        )


def _parse_vector_series(item: Any, url: str, native_histograms: bool) -> PromSeries:
    labels = _parse_labels(item, url)
    if not native_histograms:
        _reject_native_histograms(item, url)
    elif "histogram" in item:
        return PromSeries(labels=labels, samples=(), histograms=(_parse_histogram_sample(item["histogram"], url),))
    return PromSeries(labels=labels, samples=(_parse_sample(item.get("value"), url, "vector"),))


def _parse_matrix_series(item: Any, url: str, native_histograms: bool) -> PromSeries:
    labels = _parse_labels(item, url)
    if not native_histograms:
        _reject_native_histograms(item, url)
    values = item.get("values", [] if "histograms" in item else None)
    histograms = item.get("histograms", []) if native_histograms else []
    if not isinstance(values, list) or not isinstance(histograms, list):
        raise shape_error(url, "a matrix series has no 'values' list")
    return PromSeries(
        labels=labels,
        samples=tuple(_parse_sample(v, url, "matrix") for v in values),
        histograms=tuple(_parse_histogram_sample(h, url) for h in histograms),
    )


def _parse_histogram_sample(raw: Any, url: str) -> tuple[float, NativeHistogram]:
    """``[1717171717.123, {"count": "3", "sum": "0.2", "buckets": [[0, "0.1", "0.5", "3"], ...]}]`` (``buckets``
    absent when all are empty)."""
    if not isinstance(raw, list) or len(raw) != 2 or not isinstance(raw[1], dict):
        raise shape_error(url, f"a native-histogram sample is not a [timestamp, {{...}}] pair: {raw!r:.80}")
    timestamp, _ = _parse_sample([raw[0], "0"], url, "histogram")
    body = raw[1]
    try:
        buckets = tuple((float(b[1]), float(b[2]), float(b[3])) for b in body.get("buckets") or [])
        return timestamp, NativeHistogram(float(body["count"]), float(body["sum"]), buckets)
    except (KeyError, IndexError, TypeError, ValueError):
        raise shape_error(url, f"a native histogram is not count, sum and buckets: {body!r:.120}") from None


def _parse_sample(raw: Any, url: str, result_type: str) -> tuple[float, float]:
    """``[1717171717.123, "1.5"]`` -> ``(1717171717.123, 1.5)``; also "NaN", "+Inf" and "-Inf"."""
    if (
        not isinstance(raw, list)
        or len(raw) != 2
        or isinstance(raw[0], bool)
        or not isinstance(raw[0], int | float)
        or not isinstance(raw[1], str)
    ):
        raise shape_error(url, f'a {result_type} sample is not a [timestamp, "value"] pair: {raw!r:.80}')
    try:
        value = float(raw[1])
    except ValueError:
        if result_type == "string":
            raise PrometheusResponseError(
                f"the query sent to {url} returned the string {truncate(raw[1], 80)!r}, which is not a "
                "number; use an expression that returns numbers (a vector, scalar or matrix)",
                url=url,
            ) from None
        raise shape_error(url, f"a {result_type} sample value {raw[1]!r:.40} is not a number") from None
    try:
        timestamp = float(raw[0])
    except OverflowError:  # an int of hundreds of digits
        raise shape_error(url, f"a {result_type} sample timestamp is out of range: {str(raw[0])[:40]}...") from None
    return timestamp, value
