"""The one HTTP transport of the bridge: Prometheus' HTTP API and ``/metrics`` endpoints both go through it.

A :class:`Transport` wraps one ``requests.Session`` and adds what every caller needs, configured by one
:class:`TransportOptions` built once from a config section and handed down whole:

- **retries** of transient failures (connection errors, read timeouts, HTTP 503 with its ``Retry-After``, capped
  at :data:`RETRY_AFTER_CAP_S`) with exponential backoff, done by urllib3 and logged; nothing else is retried;
- **a deadline per attempt**: connecting, sending, the answer and its whole body (redirects included) end within
  ``timeout_s``. Socket waits shrink to the time left, and a server that keeps a connection busy past the deadline
  (one byte every 2 s passes any per-read timeout) has its socket shut down by a watchdog thread
  (:mod:`otel_bridge.http.attempt_deadline`);
- **a cap on the body**, checked on ``Content-Length`` and while reading;
- **TLS** ``verify``/``cert`` passed with every request, so ``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE`` cannot
  override them;
- **credentials that never show**: :meth:`Transport.scrub` masks the token, the password and the encoded
  basic-auth header in any text, and failure reasons never contain them.

Redirects are followed (at most :data:`MAX_REDIRECTS`). A redirect to another host, port or scheme drops the
``Authorization`` header (requests' own rule), so credentials never leave the configured server. A ``POST``
answered with a 301/302/303 is replayed as a ``GET`` without its form body (standard HTTP client behaviour).

Failures raise :class:`TransportError`: what happened (``kind``) and why (``reason``, free of credentials). It is
internal: each caller turns it into its public typed error, with hints naming its own config keys.
"""

from __future__ import annotations

import logging
import re
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self

import requests
import urllib3
from urllib3.connectionpool import ConnectionPool
from urllib3.exceptions import (
    ConnectTimeoutError,
    NameResolutionError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
)
from urllib3.response import BaseHTTPResponse
from urllib3.util.retry import Retry

from otel_bridge.http.attempt_deadline import AttemptDeadline, DeadlineAdapter, active_deadline, attempt_deadline
from otel_bridge.http.credentials import BearerAuth, secret_forms

__all__ = [
    "MAX_REDIRECTS",
    "RETRY_AFTER_CAP_S",
    "Answer",
    "Transport",
    "TransportError",
    "TransportOptions",
    "describe_transport_error",
    "one_line",
    "truncate",
]

_log = logging.getLogger(__name__)

#: Redirects followed per request before giving up.
MAX_REDIRECTS = 5
#: Upper bound on a server's ``Retry-After`` so that one 503 cannot stall the caller for long.
RETRY_AFTER_CAP_S = 30.0

_CHUNK_BYTES = 64 * 1024
_REASON_CHARS = 200
_BLANKS = re.compile(r"[\s\x00-\x1f\x7f]+")

#: What went wrong: no answer (``unreachable``), too many redirects, a body cut short, undecodable or too large, the
#: connection lost while reading the body, or an answer that is not valid HTTP (``malformed``, e.g. a broken
#: ``Location`` header).
FailureKind = Literal["unreachable", "redirects", "cut_off", "undecodable", "lost", "too_large", "malformed"]


class TransportError(Exception):
    """An HTTP exchange failed. ``reason`` says why, without credentials; callers turn it into a typed error.

    ``timed_out``: a timeout or the deadline ended it. ``tls``: ``"verify"`` (certificate verification failed) or
    ``"handshake"`` (another TLS failure). ``status_code``: the answer's status, when one arrived. ``cause``: the
    requests/urllib3 exception behind it, kept for debugging; it is raised ``from None``, so a traceback does not
    repeat that chain.
    """

    def __init__(
        self,
        kind: FailureKind,
        reason: str,
        *,
        url: str,
        status_code: int | None = None,
        timed_out: bool = False,
        tls: Literal["verify", "handshake"] | None = None,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(f"{url}: {reason}")
        self.cause = cause
        self.kind: FailureKind = kind
        self.reason = reason
        self.url = url
        self.status_code = status_code
        self.timed_out = timed_out
        self.tls = tls

    @property
    def refused(self) -> bool:
        """Whether the connection was refused: nothing listened at the address (no process serves that port)."""
        chain = _exception_chain(self.cause) if self.cause is not None else []
        return any(isinstance(e, ConnectionRefusedError) for e in chain)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled by its fields (a producer's child process sends it, as the ``cause`` of its error, to the parent)."""
        fields = (self.kind, self.reason, self.url, self.status_code, self.timed_out, self.tls, self.cause)
        return (_rebuilt_transport_error, fields)


def _rebuilt_transport_error(
    kind: FailureKind,
    reason: str,
    url: str,
    status_code: int | None,
    timed_out: bool,
    tls: Literal["verify", "handshake"] | None,
    cause: BaseException | None,
) -> TransportError:
    """A :class:`TransportError` from its pickled fields, raised ``from None`` as every one is."""
    error = TransportError(kind, reason, url=url, status_code=status_code, timed_out=timed_out, tls=tls, cause=cause)
    error.__suppress_context__ = True
    return error


@dataclass(frozen=True, slots=True)
class TransportOptions:
    """How a :class:`Transport` talks to its server: the attempt deadline (``timeout_s``), the body cap, retries with
    backoff, TLS (``verify`` and ``cert`` as requests takes them) and the credentials (``bearer_token`` or
    ``basic_auth``, not both), which its ``repr`` never shows. Built once from a config section and passed down whole,
    also to the scrape child process (it pickles)."""

    timeout_s: float
    max_response_bytes: int
    retries: int = 0
    backoff_s: float = 0.5
    verify: bool | str = True
    cert: tuple[str, str] | str | None = None
    bearer_token: str | None = field(default=None, repr=False)
    basic_auth: tuple[str, str] | None = field(default=None, repr=False)

    @property
    def auth_kind(self) -> Literal["bearer", "basic", "none"]:
        """Which credentials are sent (for reprs and messages; never the secret itself)."""
        return "bearer" if self.bearer_token else "basic" if self.basic_auth else "none"


@dataclass(frozen=True, slots=True)
class Answer:
    """A complete HTTP answer: status, headers (case-insensitive) and the whole body."""

    status: int
    headers: Mapping[str, str]
    body: bytes


class _RetryPolicy(Retry):
    """urllib3 retry policy: 503 is the only retried status, backoff starts at the first retry, ``Retry-After`` is
    capped at :data:`RETRY_AFTER_CAP_S`, every retry is logged and gets a fresh deadline."""

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
        deadline = active_deadline()
        if error is not None:
            cause = describe_transport_error(error, deadline.seconds if deadline else None, deadline)
        elif response is not None:
            cause = f"HTTP {response.status}"
        else:
            cause = "an unknown failure"
        if deadline is not None:
            deadline.next_attempt()
        where = f"{_pool.scheme}://{_pool.host}:{_pool.port}" if _pool is not None else "the server"
        path = (url or "").split("?", 1)[0]
        _log.info(
            "retrying %s %s%s after %s (retry %d, %s left)",
            method,
            where,
            path,
            cause,
            len(new_retry.history),
            new_retry.total,
        )
        return new_retry


class Transport:
    """Sends HTTP requests for one caller (see the module docstring). Thread-safe; :meth:`close` when done.

    ``options`` say how (deadline, cap, retries, TLS, credentials); ``headers`` are sent with every request.
    """

    def __init__(self, options: TransportOptions, *, headers: Mapping[str, str] | None = None) -> None:
        self.timeout_s = options.timeout_s
        self.retries = options.retries
        self.max_response_bytes = options.max_response_bytes
        self._verify = options.verify
        self._cert = options.cert
        bearer_token, basic_auth = options.bearer_token, options.basic_auth
        self._secrets = secret_forms(bearer_token, basic_auth)
        session = requests.Session()
        session.headers.update(headers or {})
        if bearer_token:
            session.auth = BearerAuth(bearer_token)
        elif basic_auth:
            session.auth = basic_auth
        session.max_redirects = MAX_REDIRECTS
        retry = _RetryPolicy(
            total=options.retries,
            connect=None,
            read=None,
            status=None,
            other=0,  # TLS failures and the like are not transient
            redirect=None,
            allowed_methods=frozenset({"GET", "POST"}),
            status_forcelist=frozenset({503}),
            backoff_factor=options.backoff_s,
            raise_on_status=False,
            respect_retry_after_header=True,
        )
        adapter = DeadlineAdapter(max_retries=retry)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        self._session = session

    @property
    def attempts(self) -> int:
        """Attempts per request: the first one and the retries."""
        return self.retries + 1

    def get(self, url: str, *, timeout_s: float | None = None) -> Answer:
        """``GET url``: the whole answer, or :class:`TransportError`."""
        return self._exchange("GET", url, None, timeout_s)

    def post_form(self, url: str, form: str, *, timeout_s: float | None = None) -> Answer:
        """``POST url`` with the URL-encoded ``form`` as body: the whole answer, or :class:`TransportError`."""
        return self._exchange("POST", url, form, timeout_s)

    def scrub(self, text: str) -> str:
        """``text`` with every credential (token, password, encoded basic-auth header) replaced by ``***``."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def close(self) -> None:
        """Close the pooled connections."""
        self._session.close()

    def _exchange(self, method: str, url: str, form: str | None, timeout_s: float | None) -> Answer:
        timeout = self.timeout_s if timeout_s is None else timeout_s
        headers = {"Content-Type": "application/x-www-form-urlencoded"} if form is not None else None
        with attempt_deadline(timeout) as deadline:
            try:
                response = self._session.request(
                    method,
                    url,
                    data=form,
                    headers=headers,
                    timeout=(timeout, timeout),
                    stream=True,
                    verify=self._verify,
                    cert=self._cert,
                )
            except requests.TooManyRedirects as exc:
                _log.info("%s %s failed: more than %d redirects", method, url, MAX_REDIRECTS)
                raise TransportError("redirects", f"more than {MAX_REDIRECTS} redirects", url=url, cause=exc) from None
            except requests.RequestException as exc:
                reason = self.scrub(describe_transport_error(exc, timeout, deadline))
                _log.info("%s %s failed: %s", method, url, reason)
                chain = _exception_chain(exc)
                by_deadline = deadline.expired and not _is_timeout(chain)
                timed_out = by_deadline or _is_timeout(chain)
                tls = None if by_deadline else _tls(chain)
                raise TransportError("unreachable", reason, url=url, timed_out=timed_out, tls=tls, cause=exc) from None
            except ValueError as exc:  # a malformed answer requests cannot follow (Location: http://[::1, ...)
                reason = self.scrub(truncate(one_line(f"{type(exc).__name__}: {exc}"), _REASON_CHARS))
                _log.info("%s %s failed: %s", method, url, reason)
                raise TransportError("malformed", reason, url=url, cause=exc) from None
            with response:
                body = self._read_body(response, url, timeout, deadline)
                deadline.finish()
        return Answer(status=response.status_code, headers=response.headers, body=self._scrub_body(body))

    def _scrub_body(self, body: bytes) -> bytes:
        """``body`` with every credential form masked: a server that echoes the Authorization header (an error, a
        warning, a sample or label value, a string result) cannot carry it into any message, log or record."""
        for secret in self._secrets:
            encoded = secret.encode("utf-8", errors="surrogatepass")
            if encoded in body:
                body = body.replace(encoded, b"***")
        return body

    def _read_body(self, response: requests.Response, url: str, timeout: float, deadline: AttemptDeadline) -> bytes:
        """Read the body, stopping as soon as it exceeds ``max_response_bytes``."""
        limit = self.max_response_bytes
        status = response.status_code
        declared = _content_length(response)
        encoded = response.headers.get("Content-Encoding", "identity").lower() not in ("", "identity")
        if declared is not None and declared > limit and not encoded:
            raise self._too_large(url, status, f"it announced {declared} bytes")
        body = bytearray()
        try:
            for chunk in response.iter_content(chunk_size=_CHUNK_BYTES):
                body += chunk
                if len(body) > limit:
                    raise self._too_large(url, status, f"more than {limit} bytes arrived")
        except requests.exceptions.ContentDecodingError as exc:
            encoding = response.headers.get("Content-Encoding")
            raise TransportError("undecodable", f"{encoding}", url=url, status_code=status, cause=exc) from None
        except (requests.RequestException, ValueError) as exc:
            if deadline.expired:
                reason = f"the answer did not finish within {timeout:g}s (deadline)"
                _log.info("reading the response of %s failed after %d bytes: %s", url, len(body), reason)
                raise TransportError("lost", reason, url=url, status_code=status, timed_out=True, cause=exc) from None
            if isinstance(exc, requests.exceptions.ChunkedEncodingError):
                expected = f" of the {declared} announced" if declared is not None else ""
                received = next(
                    (e.partial for e in _exception_chain(exc) if isinstance(e, urllib3.exceptions.IncompleteRead)),
                    len(body),
                )
                _log.info("reading the response of %s failed after %d bytes: %s", url, received, exc)
                raise TransportError(
                    "cut_off", f"{received}{expected}", url=url, status_code=status, cause=exc
                ) from None
            reason = self.scrub(describe_transport_error(exc, timeout))
            _log.info("reading the response of %s failed: %s", url, reason)
            chain = _exception_chain(exc)
            raise TransportError(
                "lost", reason, url=url, status_code=status, timed_out=_is_timeout(chain), tls=_tls(chain), cause=exc
            ) from None
        return bytes(body)

    def _too_large(self, url: str, status: int, detail: str) -> TransportError:
        _log.info("response of %s exceeds %d bytes (%s)", url, self.max_response_bytes, detail)
        return TransportError("too_large", detail, url=url, status_code=status)


def _content_length(response: requests.Response) -> int | None:
    value = response.headers.get("Content-Length")
    if value is None or not value.strip().isdigit():
        return None
    return int(value)


def truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, an ellipsis marking the cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def one_line(text: str) -> str:
    """``text`` with every run of whitespace and control characters made one space."""
    return _BLANKS.sub(" ", text).strip()


def _tls(chain: Sequence[BaseException]) -> Literal["verify", "handshake"] | None:
    if any(isinstance(e, ssl.SSLCertVerificationError) for e in chain):
        return "verify"
    if any(isinstance(e, ssl.SSLError | urllib3.exceptions.SSLError) for e in chain):
        return "handshake"
    return None


def describe_transport_error(exc: BaseException, timeout: float | None, deadline: AttemptDeadline | None = None) -> str:
    """A short, credential-free reason for a connection-level failure (``deadline``: the attempt's, if any)."""
    chain = _exception_chain(exc)

    def has(kind: type[BaseException] | tuple[type[BaseException], ...]) -> bool:
        return any(isinstance(e, kind) for e in chain)

    within = f" within {timeout:g}s" if timeout is not None else ""
    if has(ConnectionRefusedError):
        return "connection refused"
    if has(NameResolutionError):
        host = next((e.conn.host for e in chain if isinstance(e, NameResolutionError)), "the host")
        return f"the host name {host!r} does not resolve"
    if deadline is not None and deadline.expired and not _is_timeout(chain):
        return f"no complete answer{within} (deadline)"  # the watchdog shut the socket, whatever error that made
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
    return truncate(one_line(str(exc)), _REASON_CHARS)


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
