"""Client for the Prometheus HTTP API (``/api/v1/...``).

One :class:`PrometheusClient` wraps one ``requests.Session``. Transient failures (connection errors, read
timeouts, HTTP 503 with its ``Retry-After``) are retried with exponential backoff by urllib3; nothing else
is. Every failure becomes a typed error from :mod:`otel_bridge.errors` whose message names the URL and
what to change, and never contains credentials.

Redirects are followed (at most :data:`MAX_REDIRECTS`). A redirect to another host, port or scheme drops
the ``Authorization`` header (requests' own rule, covered by the tests), so credentials never leave the
configured server. A ``POST`` answered with a 301/302/303 is replayed as a ``GET`` without its form body
(standard HTTP client behaviour), so point ``prometheus.url`` at the final address rather than at a
redirect when long queries are sent.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import os
import re
import ssl
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self, cast
from urllib.parse import urlencode, urlsplit, urlunsplit

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import ConnectionPool, HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import (
    ConnectTimeoutError,
    NameResolutionError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
)
from urllib3.response import BaseHTTPResponse
from urllib3.util.retry import Retry

from otel_bridge.errors import (
    ConfigError,
    PrometheusAPIError,
    PrometheusError,
    PrometheusResponseError,
    PrometheusUnreachableError,
    ResponseTooLargeError,
)

__all__ = ["MAX_REDIRECTS", "PromSeries", "PrometheusClient", "QueryResult"]

logger = logging.getLogger(__name__)

#: Redirects followed per request before giving up.
MAX_REDIRECTS = 5
#: Upper bound on a server's ``Retry-After`` so that one 503 cannot stall the caller for long.
RETRY_AFTER_CAP_S = 30.0

_QUERY_IN_MESSAGE = 200
_SNIPPET_CHARS = 120
_CHUNK_BYTES = 64 * 1024
_RESULT_TYPES = ("vector", "scalar", "matrix", "string")
_BLANKS = re.compile(r"[\s\x00-\x1f\x7f]+")

# Prefixed to the "is prometheus.url ...?" question of responses that are not the Prometheus API.
_STATUS_HINTS = {
    401: "the server refused the credentials (check prometheus.bearer_token / prometheus.basic_auth); ",
    403: "the server refused the credentials (check prometheus.bearer_token / prometheus.basic_auth); ",
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
class PromSeries:
    """One series of a query result.

    ``labels`` includes ``__name__`` when Prometheus returns it; treat it as read-only. ``samples`` holds
    ``(unix seconds, value)`` pairs; a vector or scalar result has exactly one.
    """

    labels: Mapping[str, str]
    samples: tuple[tuple[float, float], ...]


@dataclass(frozen=True, slots=True)
class QueryResult:
    """The answer to an instant query: its ``resultType``, series and Prometheus' warnings.

    A scalar (and a numeric string) result is one series with empty labels.
    """

    result_type: Literal["vector", "scalar", "matrix", "string"]
    series: tuple[PromSeries, ...]
    warnings: tuple[str, ...] = ()


class _BearerAuth(requests.auth.AuthBase):
    """Sets ``Authorization: Bearer <token>``. Being the session's auth, it also keeps requests from
    applying ``~/.netrc`` credentials over it."""

    def __init__(self, token: str) -> None:
        self._token = token

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers["Authorization"] = f"Bearer {self._token}"
        return request

    def __repr__(self) -> str:
        return "_BearerAuth(token=***)"


class _RequestCounter:
    """Thread-safe count of HTTP requests written to a connection."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value = 0

    def increment(self) -> None:
        with self._lock:
            self._value += 1

    @property
    def value(self) -> int:
        with self._lock:
            return self._value


class _RetryPolicy(Retry):
    """urllib3 retry policy: 503 is the only retried status, backoff starts at the first retry,
    ``Retry-After`` is capped at :data:`RETRY_AFTER_CAP_S`, and every retry is logged."""

    # Without this urllib3 also retries 413 and 429 whenever they carry a Retry-After header.
    RETRY_AFTER_STATUS_CODES = frozenset([503])

    def get_backoff_time(self) -> float:
        attempts_failed = len(self.history)
        if attempts_failed == 0:
            return 0.0
        return float(min(self.backoff_max, self.backoff_factor * 2 ** (attempts_failed - 1)))

    def get_retry_after(self, response: BaseHTTPResponse) -> float | None:
        seconds = super().get_retry_after(response)
        return None if seconds is None else min(seconds, RETRY_AFTER_CAP_S)

    def increment(
        self,
        method: str | None = None,
        url: str | None = None,
        response: BaseHTTPResponse | None = None,
        error: Exception | None = None,
        _pool: ConnectionPool | None = None,
        _stacktrace: TracebackType | None = None,
    ) -> Self:
        new_retry = super().increment(method, url, response, error, _pool, _stacktrace)
        if error is not None:
            cause = _describe_transport_error(error, None)
        elif response is not None:
            cause = f"HTTP {response.status}"
        else:
            cause = "an unknown failure"
        where = f"{_pool.scheme}://{_pool.host}:{_pool.port}" if _pool is not None else "Prometheus"
        path = (url or "").split("?", 1)[0]
        logger.info(
            "retrying %s %s%s after %s (retry %d, %s left)",
            method,
            where,
            path,
            cause,
            len(new_retry.history),
            new_retry.total,
        )
        return new_retry


def _counting_pool_classes(counter: _RequestCounter) -> dict[str, type[HTTPConnectionPool]]:
    """Connection-pool classes whose connections count each request right before writing it.

    Connecting first means an attempt that never reached the server (connection refused, DNS failure)
    is not counted.
    """

    def before_request(conn: HTTPConnection) -> None:
        if conn.is_closed:
            conn.connect()
        counter.increment()

    class _CountingHTTPConnection(HTTPConnection):
        def request(self, *args: Any, **kwargs: Any) -> None:
            before_request(self)
            super().request(*args, **kwargs)

    class _CountingHTTPSConnection(HTTPSConnection):
        def request(self, *args: Any, **kwargs: Any) -> None:
            before_request(self)
            super().request(*args, **kwargs)

    class _CountingHTTPPool(HTTPConnectionPool):
        ConnectionCls = _CountingHTTPConnection

    class _CountingHTTPSPool(HTTPSConnectionPool):
        ConnectionCls = _CountingHTTPSConnection

    return {"http": _CountingHTTPPool, "https": _CountingHTTPSPool}


class _CountingAdapter(HTTPAdapter):
    """``HTTPAdapter`` whose pools count the requests they send."""

    def __init__(self, counter: _RequestCounter, retry: Retry) -> None:
        self._pool_classes = _counting_pool_classes(counter)
        super().__init__(max_retries=retry)

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any) -> None:
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
        self.poolmanager.pool_classes_by_scheme = self._pool_classes

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        # SOCKS managers bring their own pool classes; only the stock HTTP(S) proxy pools are swapped.
        if manager.pool_classes_by_scheme is urllib3.poolmanager.pool_classes_by_scheme:
            manager.pool_classes_by_scheme = self._pool_classes
        return manager


class PrometheusClient:
    """Thread-safe client for the Prometheus HTTP API.

    ``url`` is the Prometheus base URL (``http://host:9090``, optionally with a path prefix such as
    ``http://host/prom``). Use it as a context manager or call :meth:`close`.

    ``requests_sent`` counts the HTTP requests actually sent (retries included; attempts that failed to
    connect are not counted). Credentials never appear in ``repr()``, error messages or log records.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 10.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        bearer_token: str | None = None,
        basic_auth: tuple[str, str] | None = None,
        verify: bool = True,
        ca_file: str | None = None,
        cert_file: str | None = None,
        key_file: str | None = None,
        max_response_bytes: int = 50_000_000,
        max_series: int = 100_000,
        post_threshold_bytes: int = 2048,
        user_agent: str = "otel-bridge",
    ) -> None:
        self.url: str = _normalise_url(url)
        self._timeout_s = _positive_seconds(timeout_s, "prometheus.timeout_s")
        self._retries = _non_negative_int(retries, "prometheus.retries")
        self._backoff_s = _non_negative_seconds(backoff_s, "prometheus.backoff_s")
        self._max_response_bytes = _positive_int(max_response_bytes, "prometheus.max_response_bytes")
        self._max_series = _positive_int(max_series, "prometheus.max_series")
        self._post_threshold_bytes = _non_negative_int(post_threshold_bytes, "prometheus.post_threshold_bytes")
        self._verify: bool | str = _tls_verify(verify, ca_file)
        self._cert: tuple[str, str] | str | None = _client_cert(cert_file, key_file)
        _check_credentials(bearer_token, basic_auth)
        self._auth_kind = "bearer" if bearer_token else "basic" if basic_auth else "none"
        self._secrets = _secret_forms(bearer_token, basic_auth)
        self._counter = _RequestCounter()
        self._closed = False

        session = requests.Session()
        session.headers["User-Agent"] = user_agent
        session.headers["Accept"] = "application/json"
        if bearer_token:
            session.auth = _BearerAuth(bearer_token)
        if basic_auth:
            session.auth = basic_auth
        session.max_redirects = MAX_REDIRECTS
        adapter = _CountingAdapter(self._counter, self._retry_policy())
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        self._session = session

        if verify is False:
            logger.warning(
                "TLS certificate verification is disabled for Prometheus at %s (prometheus.verify is false): "
                "anyone on the network path can impersonate it; set prometheus.ca_file instead",
                self.url,
            )

    def _retry_policy(self) -> Retry:
        return _RetryPolicy(
            total=self._retries,
            connect=None,
            read=None,
            status=None,
            other=0,  # TLS failures and the like are not transient
            redirect=None,
            allowed_methods=frozenset({"GET", "POST"}),
            status_forcelist=frozenset({503}),
            backoff_factor=self._backoff_s,
            raise_on_status=False,
            respect_retry_after_header=True,
        )

    @property
    def requests_sent(self) -> int:
        """HTTP requests actually sent so far, retries included."""
        return self._counter.value

    def query(self, expr: str, *, time: float | None = None, timeout_s: float | None = None) -> QueryResult:
        """Evaluate the instant query ``expr`` (``/api/v1/query``), at ``time`` (unix seconds) if given.

        Sent as a GET, or as a form-encoded POST when the encoded parameters are longer than
        ``post_threshold_bytes``. ``timeout_s`` overrides the client's timeout for this call.
        """
        if not isinstance(expr, str) or not expr.strip():
            raise ConfigError("the PromQL expression is empty; give a query such as 'up'")
        params: list[tuple[str, str]] = [("query", expr)]
        if time is not None:
            params.append(("time", _format_time(time)))
        data, warnings = self._call("/api/v1/query", params, timeout_s=timeout_s, expr=expr, allow_post=True)
        url = self.url + "/api/v1/query"
        result = data.get("result") if isinstance(data, dict) else None
        if isinstance(result, list) and len(result) > self._max_series:
            raise ResponseTooLargeError(
                f"Prometheus at {url} returned {len(result)} series, more than prometheus.max_series="
                f"{self._max_series}; narrow the query (labels, by) or raise prometheus.max_series; query: "
                f"{_truncate(expr, _QUERY_IN_MESSAGE)}",
                url=url,
                limit_bytes=self._max_response_bytes,
            )
        return _parse_query_data(data, warnings, url)

    def metadata(self, metric: str | None = None) -> dict[str, list[dict[str, str]]]:
        """Metric metadata (``/api/v1/metadata``): ``{metric: [{"type", "help", "unit"}, ...]}``."""
        params = [("metric", metric)] if metric is not None else []
        url = self.url + "/api/v1/metadata"
        data, _ = self._call("/api/v1/metadata", params)
        if not isinstance(data, dict):
            raise _shape_error(url, "metadata 'data' is not an object")
        result: dict[str, list[dict[str, str]]] = {}
        for name, entries in data.items():
            if not isinstance(entries, list) or not all(_is_str_dict(e) for e in entries):
                raise _shape_error(url, f"metadata for {name!r} is not a list of string objects")
            result[name] = entries
        return result

    def buildinfo(self) -> dict[str, str]:
        """Prometheus build information (``/api/v1/status/buildinfo``): version, revision, ..."""
        url = self.url + "/api/v1/status/buildinfo"
        data, _ = self._call("/api/v1/status/buildinfo", [])
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise _shape_error(url, "buildinfo 'data' is not an object of strings")
        return cast(dict[str, str], data)

    def targets(self) -> list[dict[str, Any]]:
        """The active scrape targets (``/api/v1/targets``, ``activeTargets``)."""
        url = self.url + "/api/v1/targets"
        data, _ = self._call("/api/v1/targets", [("state", "active")])
        active = data.get("activeTargets") if isinstance(data, dict) else None
        if not isinstance(active, list) or not all(isinstance(t, dict) for t in active):
            raise _shape_error(url, "targets 'data.activeTargets' is not a list of objects")
        return cast(list[dict[str, Any]], active)

    def rule_groups(self) -> list[dict[str, Any]]:
        """The loaded recording-rule groups (``/api/v1/rules?type=record``): name, file, interval, rules, ..."""
        url = self.url + "/api/v1/rules"
        data, _ = self._call("/api/v1/rules", [("type", "record")])
        groups = data.get("groups") if isinstance(data, dict) else None
        if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
            raise _shape_error(url, "rules 'data.groups' is not a list of objects")
        return cast(list[dict[str, Any]], groups)

    def close(self) -> None:
        """Close the pooled connections. Further calls raise :class:`PrometheusError`."""
        self._closed = True
        self._session.close()

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
        verify = self._verify if isinstance(self._verify, bool) else f"ca_file={self._verify}"
        return (
            f"PrometheusClient(url={self.url!r}, auth={self._auth_kind}, verify={verify}, "
            f"timeout_s={self._timeout_s}, retries={self._retries})"
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
        url = self.url + path
        timeout = self._timeout_s if timeout_s is None else _positive_seconds(timeout_s, "timeout_s")
        encoded = urlencode(params)
        method = "POST" if allow_post and len(encoded) > self._post_threshold_bytes else "GET"
        try:
            if method == "POST":
                response = self._session.post(
                    url,
                    data=encoded,
                    headers={"Content-Type": "application/x-www-form-urlencoded"},
                    timeout=(timeout, timeout),
                    stream=True,
                    verify=self._verify,
                    cert=self._cert,
                )
            else:
                response = self._session.get(
                    f"{url}?{encoded}" if encoded else url,
                    timeout=(timeout, timeout),
                    stream=True,
                    verify=self._verify,
                    cert=self._cert,
                )
        except requests.TooManyRedirects as exc:
            logger.info("%s %s failed: more than %d redirects", method, url, MAX_REDIRECTS)
            raise PrometheusResponseError(
                f"Prometheus at {url} redirected more than {MAX_REDIRECTS} times; set prometheus.url to "
                "the final address of the Prometheus server",
                url=url,
            ) from exc
        except requests.RequestException as exc:
            reason = _describe_transport_error(exc, timeout)
            logger.info("%s %s failed: %s", method, url, reason)
            raise PrometheusUnreachableError(self._unreachable_message(url, exc, reason), url=url) from exc
        with response:
            body = self._read_body(response, url, timeout, expr)
        return self._decode(response, body, url, expr)

    def _unreachable_message(self, url: str, exc: BaseException, reason: str) -> str:
        chain = _exception_chain(exc)
        if any(isinstance(e, ssl.SSLCertVerificationError) for e in chain):
            return (
                f"cannot reach Prometheus at {url}: {reason}; set prometheus.ca_file to the CA bundle that "
                "signed its certificate (prometheus.verify: false only for testing)"
            )
        if any(isinstance(e, ssl.SSLError | urllib3.exceptions.SSLError) for e in chain):
            return (
                f"cannot reach Prometheus at {url}: {reason}; check that prometheus.url uses the right "
                "scheme (http:// or https://) and the client certificate settings"
            )
        attempts = self._retries + 1
        tries = f"{attempts} attempts" if attempts > 1 else "1 attempt, retries disabled"
        hint = "check prometheus.url and that Prometheus is running"
        if _is_timeout(chain):
            hint += ", or raise prometheus.timeout_s"
        return f"cannot reach Prometheus at {url} ({tries}): {reason}; {hint}"

    def _read_body(self, response: requests.Response, url: str, timeout: float, expr: str | None) -> bytes:
        """Read the body, stopping as soon as it exceeds ``max_response_bytes``."""
        limit = self._max_response_bytes
        declared = _content_length(response)
        encoded = response.headers.get("Content-Encoding", "identity").lower() not in ("", "identity")
        if declared is not None and declared > limit and not encoded:
            raise self._too_large(url, expr, f"it announced {declared} bytes")
        body = bytearray()
        try:
            for chunk in response.iter_content(chunk_size=_CHUNK_BYTES):
                body += chunk
                if len(body) > limit:
                    raise self._too_large(url, expr, f"more than {limit} bytes arrived")
        except requests.exceptions.ChunkedEncodingError as exc:
            expected = f" of the {declared} announced" if declared is not None else ""
            received = next(
                (e.partial for e in _exception_chain(exc) if isinstance(e, urllib3.exceptions.IncompleteRead)),
                len(body),
            )
            logger.info("reading the response of %s failed after %d bytes: %s", url, received, exc)
            raise PrometheusResponseError(
                f"the response from Prometheus at {url} (HTTP {response.status_code}) was cut off after "
                f"{received}{expected} bytes; the connection broke mid-answer: check Prometheus' health "
                "and any proxy or load balancer between (their timeouts and body limits)",
                url=url,
                status_code=response.status_code,
            ) from exc
        except requests.exceptions.ContentDecodingError as exc:
            raise PrometheusResponseError(
                f"the response from Prometheus at {url} (HTTP {response.status_code}) could not be "
                f"decompressed ({response.headers.get('Content-Encoding')}); check any proxy in between",
                url=url,
                status_code=response.status_code,
            ) from exc
        except requests.RequestException as exc:
            reason = _describe_transport_error(exc, timeout)
            logger.info("reading the response of %s failed: %s", url, reason)
            raise PrometheusUnreachableError(
                f"lost Prometheus at {url} while reading its answer: {reason}; check that Prometheus is "
                "healthy, or raise prometheus.timeout_s",
                url=url,
            ) from exc
        return bytes(body)

    def _too_large(self, url: str, expr: str | None, detail: str) -> ResponseTooLargeError:
        limit = self._max_response_bytes
        logger.info("response of %s exceeds %d bytes (%s)", url, limit, detail)
        query = f"; query: {_truncate(expr, _QUERY_IN_MESSAGE)}" if expr is not None else ""
        return ResponseTooLargeError(
            f"the response from Prometheus at {url} is larger than prometheus.max_response_bytes="
            f"{limit} ({detail}); raise prometheus.max_response_bytes or narrow the query "
            f"(fewer series or labels){query}",
            url=url,
            limit_bytes=limit,
        )

    def _snippet(self, body: bytes) -> str:
        """The first characters of ``body``, whitespace collapsed and any credential masked."""
        text = _BLANKS.sub(" ", body[: _SNIPPET_CHARS * 4].decode("utf-8", errors="replace")).strip()
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return _truncate(text, _SNIPPET_CHARS)

    def _decode(
        self, response: requests.Response, body: bytes, url: str, expr: str | None
    ) -> tuple[Any, tuple[str, ...]]:
        status = response.status_code
        content_type = response.headers.get("Content-Type", "")
        described = f"HTTP {status}, {content_type or 'no Content-Type'}"
        status_hint = _STATUS_HINTS.get(status, "")
        if _looks_like_html(content_type, body):
            raise PrometheusResponseError(
                f"Prometheus at {url} answered with an HTML page ({described}): {self._snippet(body)!r}; "
                f"{status_hint}is prometheus.url pointing at Prometheus and not at a proxy/Grafana login page?",
                url=url,
                status_code=status,
            )
        try:
            envelope = json.loads(body)
        except ValueError as exc:
            looks_cut = body.lstrip()[:1] in (b"{", b"[")
            what = "JSON that ends early (truncated)" if looks_cut else "a body that is not JSON"
            raise PrometheusResponseError(
                f"Prometheus at {url} answered with {what} ({described}): {self._snippet(body)!r}; "
                f"{status_hint}is prometheus.url pointing at Prometheus' HTTP API (and not at a proxy or "
                "another service)?",
                url=url,
                status_code=status,
            ) from exc
        state = envelope.get("status") if isinstance(envelope, dict) else None
        if state == "error":
            raise _api_error(cast(dict[str, Any], envelope), status, url, expr)
        if state != "success" or "data" not in envelope or not 200 <= status < 300:
            raise PrometheusResponseError(
                f"Prometheus at {url} answered with JSON that is not a Prometheus API response "
                f"({described}): {self._snippet(body)!r}; {status_hint}is prometheus.url the Prometheus "
                "base URL (e.g. http://host:9090, without /api/v1)?",
                url=url,
                status_code=status,
            )
        raw_warnings = envelope.get("warnings") or []
        if not isinstance(raw_warnings, list) or not all(isinstance(w, str) for w in raw_warnings):
            raise _shape_error(url, "'warnings' is not a list of strings")
        for warning in raw_warnings:
            logger.info("Prometheus at %s warned: %s", url, _truncate(warning, 300))
        return envelope["data"], tuple(raw_warnings)


# --- validation ------------------------------------------------------------------------------------


def _normalise_url(url: str) -> str:
    if not isinstance(url, str):
        raise ConfigError(f"prometheus.url must be a string, got {type(url).__name__}")
    parts = urlsplit(url.strip())
    if parts.scheme.lower() not in ("http", "https"):
        raise ConfigError(f"prometheus.url must start with http:// or https://, got {_safe_url_for_error(url)!r}")
    if not parts.hostname:
        raise ConfigError(f"prometheus.url has no host: {_safe_url_for_error(url)!r}")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(
            f"prometheus.url must not contain credentials (host {parts.hostname}); set "
            "prometheus.basic_auth or prometheus.bearer_token instead"
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


def _positive_seconds(value: float, key: str) -> float:
    if not _is_finite_number(value) or value <= 0:
        raise ConfigError(f"{key} must be a positive number of seconds, got {value!r}")
    return float(value)


def _non_negative_seconds(value: float, key: str) -> float:
    if not _is_finite_number(value) or value < 0:
        raise ConfigError(f"{key} must be a number of seconds >= 0, got {value!r}")
    return float(value)


def _non_negative_int(value: int, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{key} must be an integer >= 0, got {value!r}")
    return value


def _positive_int(value: int, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{key} must be an integer > 0, got {value!r}")
    return value


def _tls_verify(verify: bool, ca_file: str | None) -> bool | str:
    if not isinstance(verify, bool):
        raise ConfigError(f"prometheus.verify must be true or false, got {verify!r}")
    if ca_file is None:
        return verify
    if not verify:
        raise ConfigError(
            "prometheus.ca_file is set but prometheus.verify is false; remove one of them "
            "(ca_file only matters when certificates are verified)"
        )
    if not os.path.exists(ca_file):
        raise ConfigError(f"prometheus.ca_file {ca_file!r} does not exist; give a PEM CA bundle file")
    return ca_file


def _client_cert(cert_file: str | None, key_file: str | None) -> tuple[str, str] | str | None:
    if key_file is not None and cert_file is None:
        raise ConfigError("prometheus.key_file is set without prometheus.cert_file; set both (or neither)")
    for key, path in (("prometheus.cert_file", cert_file), ("prometheus.key_file", key_file)):
        if path is not None and not os.path.isfile(path):
            raise ConfigError(f"{key} {path!r} does not exist; give a PEM file")
    if cert_file is None:
        return None
    return (cert_file, key_file) if key_file is not None else cert_file


def _check_credentials(bearer_token: str | None, basic_auth: tuple[str, str] | None) -> None:
    if bearer_token is not None and basic_auth is not None:
        raise ConfigError("set prometheus.bearer_token or prometheus.basic_auth, not both")
    if bearer_token is not None and (
        not isinstance(bearer_token, str)
        or not bearer_token
        or bearer_token != bearer_token.strip()
        or any(ord(c) < 0x20 or ord(c) == 0x7F for c in bearer_token)
    ):
        raise ConfigError(
            "prometheus.bearer_token must be a non-empty string without surrounding whitespace or control "
            "characters (a token read from a file often ends with a newline: strip it)"
        )
    if basic_auth is not None:
        if (
            not isinstance(basic_auth, tuple)
            or len(basic_auth) != 2
            or not all(isinstance(part, str) for part in basic_auth)
        ):
            raise ConfigError("prometheus.basic_auth must be a (username, password) pair of strings")
        if not basic_auth[0] or ":" in basic_auth[0]:
            raise ConfigError("prometheus.basic_auth username must be non-empty and must not contain ':'")


def _secret_forms(bearer_token: str | None, basic_auth: tuple[str, str] | None) -> tuple[str, ...]:
    """The strings that must never be echoed back (token, password, encoded basic-auth header)."""
    forms: list[str] = []
    if bearer_token:
        forms.append(bearer_token)
    if basic_auth:
        if basic_auth[1]:
            forms.append(basic_auth[1])
        forms.append(base64.b64encode(f"{basic_auth[0]}:{basic_auth[1]}".encode()).decode())
    return tuple(forms)


def _format_time(time: float) -> str:
    if not _is_finite_number(time):
        raise ConfigError(f"query time must be a finite unix timestamp in seconds, got {time!r}")
    return f"{time:.3f}"


# --- response handling -----------------------------------------------------------------------------


def _content_length(response: requests.Response) -> int | None:
    value = response.headers.get("Content-Length")
    if value is None or not value.strip().isdigit():
        return None
    return int(value)


def _looks_like_html(content_type: str, body: bytes) -> bool:
    if "html" in content_type.lower():
        return True
    head = body[:64].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html"))


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _api_error(envelope: dict[str, Any], status: int, url: str, expr: str | None) -> PrometheusAPIError:
    error_type = envelope.get("errorType")
    error = envelope.get("error")
    error_type = error_type if isinstance(error_type, str) else "unknown"
    error = _BLANKS.sub(" ", error).strip() if isinstance(error, str) else "(no error message)"
    hint = _API_ERROR_HINTS.get(error_type, "see the error message")
    query = f"; query: {_truncate(expr, _QUERY_IN_MESSAGE)}" if expr is not None else ""
    logger.info("Prometheus at %s answered %s: %s (HTTP %d)", url, error_type, _truncate(error, 300), status)
    return PrometheusAPIError(
        f"Prometheus at {url} answered {error_type}: {_truncate(error, 500)} (HTTP {status}); {hint}{query}",
        url=url,
        status_code=status,
        error_type=error_type,
        error=error,
    )


def _shape_error(url: str, detail: str) -> PrometheusResponseError:
    return PrometheusResponseError(
        f"Prometheus at {url} answered with JSON of an unexpected shape ({detail}); is prometheus.url "
        "pointing at Prometheus (or a compatible API) and not at another service?",
        url=url,
    )


def _is_str_dict(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _parse_query_data(data: Any, warnings: tuple[str, ...], url: str) -> QueryResult:
    if not isinstance(data, dict) or data.get("resultType") not in _RESULT_TYPES or "result" not in data:
        raise _shape_error(url, "'data' lacks a known 'resultType' and a 'result'")
    result_type = cast(Literal["vector", "scalar", "matrix", "string"], data["resultType"])
    result = data["result"]
    series: tuple[PromSeries, ...]
    if result_type in ("scalar", "string"):
        series = (PromSeries(labels={}, samples=(_parse_sample(result, url, result_type),)),)
    elif not isinstance(result, list):
        raise _shape_error(url, f"a {result_type} 'result' is not a list")
    elif result_type == "vector":
        series = tuple(_parse_vector_series(item, url) for item in result)
    else:
        series = tuple(_parse_matrix_series(item, url) for item in result)
    return QueryResult(result_type=result_type, series=series, warnings=warnings)


def _parse_labels(item: Any, url: str) -> dict[str, str]:
    if not isinstance(item, dict):
        raise _shape_error(url, "a series is not an object")
    labels = item.get("metric", {})
    if not _is_str_dict(labels):
        raise _shape_error(url, "a series' 'metric' is not an object of strings")
    return dict(labels)


def _reject_native_histograms(item: dict[str, Any], url: str) -> None:
    if "histogram" in item or "histograms" in item:
        raise PrometheusResponseError(
            f"Prometheus at {url} returned native-histogram samples, which otel-bridge does not read; wrap "
            "the expression in histogram_quantile(), histogram_sum() or histogram_count()",
            url=url,
        )


def _parse_vector_series(item: Any, url: str) -> PromSeries:
    labels = _parse_labels(item, url)
    _reject_native_histograms(item, url)
    return PromSeries(labels=labels, samples=(_parse_sample(item.get("value"), url, "vector"),))


def _parse_matrix_series(item: Any, url: str) -> PromSeries:
    labels = _parse_labels(item, url)
    _reject_native_histograms(item, url)
    values = item.get("values")
    if not isinstance(values, list):
        raise _shape_error(url, "a matrix series has no 'values' list")
    return PromSeries(labels=labels, samples=tuple(_parse_sample(v, url, "matrix") for v in values))


def _parse_sample(raw: Any, url: str, result_type: str) -> tuple[float, float]:
    """``[1717171717.123, "1.5"]`` -> ``(1717171717.123, 1.5)``; also "NaN", "+Inf" and "-Inf"."""
    if (
        not isinstance(raw, list)
        or len(raw) != 2
        or isinstance(raw[0], bool)
        or not isinstance(raw[0], int | float)
        or not isinstance(raw[1], str)
    ):
        raise _shape_error(url, f'a {result_type} sample is not a [timestamp, "value"] pair: {raw!r:.80}')
    try:
        value = float(raw[1])
    except ValueError:
        if result_type == "string":
            raise PrometheusResponseError(
                f"the query sent to {url} returned the string {_truncate(raw[1], 80)!r}, which is not a "
                "number; use an expression that returns numbers (a vector, scalar or matrix)",
                url=url,
            ) from None
        raise _shape_error(url, f"a {result_type} sample value {raw[1]!r:.40} is not a number") from None
    return float(raw[0]), value


def _describe_transport_error(exc: BaseException, timeout: float | None) -> str:
    """A short, credential-free reason for a connection-level failure."""
    chain = _exception_chain(exc)

    def has(kind: type[BaseException] | tuple[type[BaseException], ...]) -> bool:
        return any(isinstance(e, kind) for e in chain)

    within = f" within {timeout:g}s" if timeout is not None else ""
    if has(ConnectionRefusedError):
        return "connection refused"
    if has(NameResolutionError):
        host = next((e.conn.host for e in chain if isinstance(e, NameResolutionError)), "the host")
        return f"the host name {host!r} does not resolve"
    if has(ssl.SSLCertVerificationError):
        detail = next(e.verify_message for e in chain if isinstance(e, ssl.SSLCertVerificationError))
        return f"TLS certificate verification failed ({detail})"
    if has((ssl.SSLError, urllib3.exceptions.SSLError)):
        return "TLS handshake failed"
    if has(ReadTimeoutError):
        return f"no answer{within} (read timeout)"
    if _is_timeout(chain):
        return f"could not connect{within} (connect timeout)"
    os_error = next((e for e in chain if isinstance(e, OSError) and e.strerror), None)
    if has(NewConnectionError) and os_error is not None:
        return f"could not connect ({os_error.strerror})"
    if has(ProtocolError) or has(ConnectionError):
        return "the connection was closed before a complete answer arrived"
    return _truncate(_BLANKS.sub(" ", str(exc)), 200)


def _is_timeout(chain: Sequence[BaseException]) -> bool:
    """Whether a timeout caused the failure (urllib3 files refused connections under connect timeouts too)."""
    if any(isinstance(e, ConnectionRefusedError | NameResolutionError) for e in chain):
        return False
    return any(
        isinstance(e, ReadTimeoutError | TimeoutError)
        or (isinstance(e, ConnectTimeoutError) and not isinstance(e, NewConnectionError))
        for e in chain
    )


def _exception_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and every exception it wraps (causes, contexts, urllib3 reasons, exception arguments)."""
    seen: set[int] = set()
    out: list[BaseException] = []
    stack: list[BaseException | None] = [exc]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        out.append(current)
        stack.extend((current.__cause__, current.__context__))
        reason = getattr(current, "reason", None)
        if isinstance(reason, BaseException):
            stack.append(reason)
        stack.extend(arg for arg in current.args if isinstance(arg, BaseException))
    return out
