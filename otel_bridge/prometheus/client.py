"""Client for the Prometheus HTTP API (``/api/v1/...``).

A :class:`PrometheusClient` takes plain arguments: the base URL, the
:class:`~otel_bridge.http.transport.TransportOptions` its requests go out with (retries of transient failures with
backoff, a deadline per attempt, a capped body read, TLS and credentials) and the caps on an answer. It knows nothing of
the configuration: :func:`otel_bridge.producers.promql.client_for` builds one from the ``prometheus`` section
(and :func:`~otel_bridge.producers.promql.connect` also resolves ``url: auto``). Every failure becomes a typed
error from :mod:`otel_bridge.errors` whose message names the URL and the config key to change, and never contains
credentials.

Queries longer than ``prometheus.post_threshold_bytes`` are sent as form ``POST``s; one answered with a
301/302/303 is replayed as a ``GET`` without its form body (standard HTTP client behaviour), so point
``prometheus.url`` at the final address rather than at a redirect when long queries are sent.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self, cast
from urllib.parse import urlencode, urlsplit, urlunsplit

from otel_bridge.errors import (
    ConfigError,
    PrometheusError,
    PrometheusResponseError,
    PrometheusUnreachableError,
    ResponseTooLargeError,
)
from otel_bridge.http.transport import MAX_REDIRECTS, Transport, TransportError, TransportOptions, truncate
from otel_bridge.prometheus.answers import (
    QUERY_IN_MESSAGE,
    QueryResult,
    decode_envelope,
    is_str_dict,
    parse_query_data,
    shape_error,
)

__all__ = ["PrometheusClient", "check_credentials", "normalise_url"]

_BEARER_KEYS = "prometheus.auth.bearer_token_env / prometheus.auth.bearer_token_file"
_BASIC_KEYS = "prometheus.auth.username with prometheus.auth.password_env / prometheus.auth.password_file"


class PrometheusClient:
    """Thread-safe client for the Prometheus HTTP API at ``url``.

    ``url`` is the Prometheus base URL (``http://host:9090``, optionally with a path prefix such as
    ``http://host/prom``; see :func:`normalise_url`). ``transport`` says how requests go out (timeout, retries, body
    cap, TLS, credentials); an answer with more than ``max_series`` series or about ``max_samples`` samples is refused,
    and a query longer than ``post_threshold_bytes`` is sent as a form ``POST``. Use it as a context manager or call
    :meth:`close`. Credentials never appear in ``repr()``, error messages or log records.
    """

    def __init__(
        self,
        url: str,
        transport: TransportOptions,
        *,
        max_series: int,
        max_samples: int,
        post_threshold_bytes: int,
        user_agent: str = "otel-bridge",
    ) -> None:
        self.url: str = normalise_url(url)
        check_credentials(transport.bearer_token, transport.basic_auth)
        self._options = transport
        self._max_series = max_series
        self._max_samples = max_samples
        self._post_threshold_bytes = post_threshold_bytes
        self._transport = Transport(transport, headers={"User-Agent": user_agent, "Accept": "application/json"})
        self._closed = False
        self._query_params: tuple[tuple[str, str], ...] = ()

    @property
    def transport(self) -> TransportOptions:
        """How this client's requests go out (it pickles: a producer's child builds its own client with it)."""
        return self._options

    def add_query_params(self, params: Sequence[tuple[str, str]]) -> None:
        """Send ``params`` with every query from now on: what the store needs to answer a query at an exact time
        (VictoriaMetrics: ``nocache=1``, or it evaluates a query near now at ``now - search.latencyOffset``)."""
        self._query_params = (*self._query_params, *params)

    def query(
        self, expr: str, *, time: float | None = None, timeout_s: float | None = None, native_histograms: bool = False
    ) -> QueryResult:
        """Evaluate the instant query ``expr`` (``/api/v1/query``), at ``time`` (unix seconds) if given; its
        native-histogram samples are read with ``native_histograms`` (:attr:`PromSeries.histograms`), else refused.

        Sent as a GET, or as a form-encoded POST when the encoded parameters are longer than
        ``post_threshold_bytes``. ``timeout_s`` overrides the client's timeout for this call.
        """
        if not isinstance(expr, str) or not expr.strip():
            raise ConfigError("the PromQL expression is empty; give a query such as 'up'")
        params: list[tuple[str, str]] = [("query", expr), *self._query_params]
        if time is not None:
            params.append(("time", _format_time(time)))
        data, warnings = self._call("/api/v1/query", params, timeout_s=timeout_s, expr=expr, allow_post=True)
        url = self.url + "/api/v1/query"
        result = data.get("result") if isinstance(data, dict) else None
        if isinstance(result, list) and len(result) > self._max_series:
            raise ResponseTooLargeError(
                f"Prometheus at {url} returned {len(result)} series, more than prometheus.max_series="
                f"{self._max_series}; narrow the query (labels, by) or raise prometheus.max_series; query: "
                f"{truncate(expr, QUERY_IN_MESSAGE)}",
                url=url,
                limit_bytes=self._options.max_response_bytes,
            )
        return parse_query_data(data, warnings, url, native_histograms=native_histograms)

    def metadata(self, metric: str | None = None) -> dict[str, list[dict[str, str]]]:
        """Metric metadata (``/api/v1/metadata``): ``{metric: [{"type", "help", "unit"}, ...]}``."""
        params = [("metric", metric)] if metric is not None else []
        url = self.url + "/api/v1/metadata"
        data, _ = self._call("/api/v1/metadata", params)
        if not isinstance(data, dict):
            raise shape_error(url, "metadata 'data' is not an object")
        result: dict[str, list[dict[str, str]]] = {}
        for name, entries in data.items():
            if not isinstance(entries, list) or not all(is_str_dict(e) for e in entries):
                raise shape_error(url, f"metadata for {name!r} is not a list of string objects")
            result[name] = entries
        return result

    def buildinfo(self) -> dict[str, Any]:
        """Build information (``/api/v1/status/buildinfo``): version, revision, ... (Grafana Mimir adds
        ``application`` and ``features``)."""
        url = self.url + "/api/v1/status/buildinfo"
        data, _ = self._call("/api/v1/status/buildinfo", [])
        if not isinstance(data, dict) or not isinstance(data.get("version"), str):
            raise shape_error(url, "buildinfo 'data' is not an object with a version")
        return cast(dict[str, Any], data)

    def features(self) -> dict[str, Any]:
        """What the server says it supports (``/api/v1/features``, Prometheus 3.9 and later): ``{"promql":
        {"anchored": true, ...}, "api": {...}, ...}``; a :class:`PrometheusError` from a server without it."""
        url = self.url + "/api/v1/features"
        data, _ = self._call("/api/v1/features", [])
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise shape_error(url, "features 'data' is not an object of objects")
        return cast(dict[str, Any], data)

    def flags(self) -> dict[str, str] | None:
        """VictoriaMetrics' ``/flags`` (``-name="value"`` lines: the flags it was started with), or ``None`` from a
        server that answers that path otherwise (Prometheus serves its web UI there)."""
        try:
            answer = self._transport.get(self.url + "/flags")
        except TransportError as exc:
            raise self._failure(exc, self.url + "/flags", None) from exc
        if answer.status != 200 or not answer.headers.get("Content-Type", "").startswith("text/plain"):
            return None
        flags: dict[str, str] = {}
        for line in answer.body.decode("utf-8", "replace").splitlines():
            name, equals, value = line.strip().partition("=")
            if not name.startswith("-") or not equals:
                return None
            flags[name[1:]] = value.strip('"')
        return flags

    def runtimeinfo(self) -> dict[str, Any]:
        """Prometheus runtime information (``/api/v1/status/runtimeinfo``): ``startTime``, ``reloadConfigSuccess``..."""
        url = self.url + "/api/v1/status/runtimeinfo"
        data, _ = self._call("/api/v1/status/runtimeinfo", [])
        if not isinstance(data, dict):
            raise shape_error(url, "runtimeinfo 'data' is not an object")
        return cast(dict[str, Any], data)

    def targets(self) -> list[dict[str, Any]]:
        """The active scrape targets (``/api/v1/targets``, ``activeTargets``)."""
        url = self.url + "/api/v1/targets"
        data, _ = self._call("/api/v1/targets", [("state", "active")])
        active = data.get("activeTargets") if isinstance(data, dict) else None
        if not isinstance(active, list) or not all(isinstance(t, dict) for t in active):
            raise shape_error(url, "targets 'data.activeTargets' is not a list of objects")
        return cast(list[dict[str, Any]], active)

    def rule_groups(self) -> list[dict[str, Any]]:
        """The loaded recording-rule groups (``/api/v1/rules?type=record``): name, file, interval, rules, ..."""
        url = self.url + "/api/v1/rules"
        data, _ = self._call("/api/v1/rules", [("type", "record")])
        groups = data.get("groups") if isinstance(data, dict) else None
        if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
            raise shape_error(url, "rules 'data.groups' is not a list of objects")
        return cast(list[dict[str, Any]], groups)

    def close(self) -> None:
        """Close the pooled connections. Further calls raise :class:`PrometheusError`."""
        self._closed = True
        self._transport.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        options = self._options
        verify = f"ca_file={options.verify}" if isinstance(options.verify, str) else options.verify
        return (
            f"PrometheusClient(url={self.url!r}, auth={options.auth_kind}, verify={verify}, "
            f"timeout_s={options.timeout_s}, retries={options.retries})"
        )

    def _call(
        self,
        path: str,
        params: Sequence[tuple[str, str]],
        *,
        timeout_s: float | None = None,
        expr: str | None = None,
        allow_post: bool = False,
    ) -> tuple[Any, tuple[str, ...]]:
        """Send one API request; return the envelope's ``data`` and ``warnings`` or raise a typed error."""
        if self._closed:
            raise PrometheusError(f"this PrometheusClient for {self.url} is closed; create a new one", url=self.url)
        if timeout_s is not None and (not _is_finite_number(timeout_s) or timeout_s <= 0):
            raise ConfigError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        url = self.url + path
        encoded = urlencode(params)
        try:
            if allow_post and len(encoded) > self._post_threshold_bytes:
                answer = self._transport.post_form(url, encoded, timeout_s=timeout_s)
            else:
                answer = self._transport.get(f"{url}?{encoded}" if encoded else url, timeout_s=timeout_s)
        except TransportError as exc:
            failure = self._failure(exc, url, expr)
            failure.cause = exc  # kept for debugging; not chained: the message already says what failed and why
            raise failure from None
        # Every sample is one '[' (besides a matrix series' "values" list and the result list): the samples, counted
        # before the JSON is decoded into objects ~30x its size ('[' inside label values can only add to the count).
        body = answer.body
        samples = body.count(b"[") - body.count(b'"values"') - 1 if 200 <= answer.status < 300 else 0
        if samples > self._max_samples:
            query = f"; query: {truncate(expr, QUERY_IN_MESSAGE)}" if expr is not None else ""
            raise ResponseTooLargeError(
                f"Prometheus at {url} returned about {samples} samples, more than prometheus.max_samples="
                f"{self._max_samples}; narrow the query (labels, by, a shorter range) or raise "
                f"prometheus.max_samples{query}",
                url=url,
                limit_bytes=self._options.max_response_bytes,
            )
        return decode_envelope(answer, url, expr, self._transport.scrub)

    def _failure(self, exc: TransportError, url: str, expr: str | None) -> PrometheusError:
        """The typed error for a failed exchange, with the config keys to change."""
        reason = exc.reason
        if exc.kind == "redirects":
            return PrometheusResponseError(
                f"Prometheus at {url} redirected more than {MAX_REDIRECTS} times; set prometheus.url to the final "
                "address of the Prometheus server",
                url=url,
            )
        if exc.kind == "too_large":
            limit = self._options.max_response_bytes
            query = f"; query: {truncate(expr, QUERY_IN_MESSAGE)}" if expr is not None else ""
            return ResponseTooLargeError(
                f"the response from Prometheus at {url} is larger than prometheus.max_response_bytes={limit} "
                f"({reason}); raise prometheus.max_response_bytes or narrow the query (fewer series or labels){query}",
                url=url,
                limit_bytes=limit,
            )
        if exc.kind == "cut_off":
            return PrometheusResponseError(
                f"the response from Prometheus at {url} (HTTP {exc.status_code}) was cut off after {reason} bytes; "
                "the connection broke mid-answer: check Prometheus' health and any proxy or load balancer between "
                "(their timeouts and body limits)",
                url=url,
                status_code=exc.status_code,
            )
        if exc.kind == "undecodable":
            return PrometheusResponseError(
                f"the response from Prometheus at {url} (HTTP {exc.status_code}) could not be decompressed "
                f"({reason}); check any proxy in between",
                url=url,
                status_code=exc.status_code,
            )
        if exc.kind == "lost":
            return PrometheusUnreachableError(
                f"lost Prometheus at {url} while reading its answer: {reason}; check that Prometheus is healthy, "
                "or raise prometheus.timeout_s",
                url=url,
            )
        if exc.kind == "malformed":
            return PrometheusResponseError(
                f"Prometheus at {url} answered with something that is not valid HTTP ({reason}); is prometheus.url "
                "pointing at Prometheus (and not at a proxy or another service)?",
                url=url,
            )
        return PrometheusUnreachableError(self._unreachable_message(exc, url), url=url)

    def _unreachable_message(self, exc: TransportError, url: str) -> str:
        if exc.tls == "verify":
            return (
                f"cannot reach Prometheus at {url}: {exc.reason}; set prometheus.tls.ca_file to the CA bundle that "
                "signed its certificate (prometheus.tls.verify: false only for testing)"
            )
        if exc.tls == "handshake":
            return (
                f"cannot reach Prometheus at {url}: {exc.reason}; check that prometheus.url uses the right scheme "
                "(http:// or https://) and the client certificate settings (prometheus.tls.cert_file, "
                "prometheus.tls.key_file)"
            )
        attempts = self._transport.attempts
        tries = f"{attempts} attempts" if attempts > 1 else "1 attempt, retries disabled"
        hint = "check prometheus.url and that Prometheus is running"
        if exc.timed_out:
            hint += ", or raise prometheus.timeout_s"
        return f"cannot reach Prometheus at {url} ({tries}): {exc.reason}; {hint}"


def normalise_url(url: str) -> str:
    """``url`` checked (it may come from discovery or the command line, not the config) and without a final ``/``;
    a :class:`ConfigError` naming ``prometheus.url`` otherwise."""
    if not isinstance(url, str):
        raise ConfigError(f"prometheus.url must be a string, got {type(url).__name__}")
    parts = urlsplit(url.strip())
    if parts.scheme.lower() not in ("http", "https"):
        raise ConfigError(f"prometheus.url must start with http:// or https://, got {_safe_url_for_error(url)!r}")
    if not parts.hostname:
        raise ConfigError(f"prometheus.url has no host: {_safe_url_for_error(url)!r}")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(
            f"prometheus.url must not contain credentials (host {parts.hostname}); set {_BASIC_KEYS} (or "
            f"{_BEARER_KEYS}) instead"
        )
    if parts.query or parts.fragment:
        raise ConfigError(
            f"prometheus.url must not have a query string or fragment: {_safe_url_for_error(url)!r}; "
            "give the base URL only (e.g. http://host:9090 or http://host/prometheus)"
        )
    try:
        _ = parts.port  # urllib validates the port lazily
    except ValueError as exc:
        raise ConfigError(f"prometheus.url has an invalid port: {_safe_url_for_error(url)!r}") from exc
    return urlunsplit((parts.scheme.lower(), parts.netloc, parts.path.rstrip("/"), "", ""))


def _safe_url_for_error(url: str) -> str:
    """``url`` with any ``user:password@`` part masked."""
    return re.sub(r"//[^/@]*@", "//***@", url)


def _is_finite_number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def check_credentials(bearer_token: str | None, basic_auth: tuple[str, str] | None) -> None:
    """A :class:`ConfigError` for secrets that cannot go into an HTTP header (the config checks where they come from,
    not what they hold)."""
    if bearer_token is not None and any(ord(c) < 0x20 or ord(c) == 0x7F for c in bearer_token):
        raise ConfigError(
            f"the bearer token (from {_BEARER_KEYS}) contains control characters; it must be one line of text"
        )
    if basic_auth is not None and (not basic_auth[0] or ":" in basic_auth[0]):
        raise ConfigError("prometheus.auth.username must be non-empty and must not contain ':'")


def _format_time(time: float) -> str:
    if not _is_finite_number(time):
        raise ConfigError(f"query time must be a finite unix timestamp in seconds, got {time!r}")
    return f"{time:.3f}"
