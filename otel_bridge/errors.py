"""Typed errors. Every message says what went wrong and what to change.

Hierarchy::

    OtelBridgeError
    ├── ConfigError                 bad configuration (raised at start-up)
    │   └── QueryTooLongError            a part of a step's query is longer than the store accepts
    ├── SourceError                 an infrastructure source could not be read (``startup`` decides at start-up)
    │   ├── PrometheusError             talking to the Prometheus HTTP API
    │   │   ├── PrometheusUnreachableError   connection refused / timed out (after retries)
    │   │   ├── PrometheusAPIError           Prometheus answered ``status: error`` (errorType/error)
    │   │   ├── PrometheusResponseError      the answer is not the Prometheus JSON API (HTML, truncated, ...)
    │   │   └── ResponseTooLargeError        the body exceeded the configured cap
    │   ├── ScrapeError                 reading a ``/metrics`` endpoint
    │   └── DiscoveryError              Prometheus / scrape targets could not be found (lists what was tried)
    ├── ExpositionParseError        text exposition that cannot be parsed
    │   └── SampleLimitError             more samples of the configured metrics than scrape.max_series
    ├── BackendError                a tracker backend failed
    ├── RedactedCauseError          a library's exception behind one of these, its URL credentials replaced
    ├── StepOrderError              steps logged out of order, or to a step already recorded
    ├── InvalidStepError            a step that is not an integer, or too large to be stored exactly
    ├── InvalidPhaseError           a phase name that is not a non-empty string
    ├── ReservedKeyError            a trainer key in the bridge's own ``otel_bridge/`` namespace
    ├── DeliveryTimeoutError        a step's record was not delivered in time
    ├── TrainingThreadError         step/log/phase called from a second thread while the first is alive
    └── BridgeClosedError           the bridge was used after ``close()``
"""

from __future__ import annotations

import re
from typing import Any

_URL_USERINFO = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*:?//)[^\s'\"`<>(){}\[\],]+@"  # scheme://user:password@, http//user@, ...
    r"|(?P<user>[^\s'\"`<>(){}\[\],/:@]+):[^\s'\"`<>(){}\[\],]*@"  # user:password@host without a scheme
)


def install_hint(extras: str) -> str:
    """The one line that installs otel-bridge's ``extras`` (``wandb``, ``ray,tensorboard``) into this environment,
    as the README's Install section says: from the clone this package came from
    (``pip install '/home/me/otel-bridge[wandb]'``), found through pip's record of the install (``direct_url.json``)
    or, when it runs from a clone's source tree, that tree; otherwise ``<your otel-bridge clone>`` stands for it."""
    return f"pip install '{_clone_path()}[{extras}]'"


def _clone_path() -> str:
    import importlib.metadata
    import json
    from pathlib import Path
    from urllib.parse import unquote, urlparse

    source = Path(__file__).resolve().parents[1]
    if (source / "pyproject.toml").is_file():  # run from a clone's tree (or installed editable from it)
        return str(source)
    try:
        recorded = importlib.metadata.distribution("otel-bridge").read_text("direct_url.json")
        url = urlparse(str(json.loads(recorded or "{}").get("url", "")))
    except (importlib.metadata.PackageNotFoundError, ValueError, AttributeError):
        url = urlparse("")
    return unquote(url.path) if url.scheme == "file" and url.path else "<your otel-bridge clone>"


def redact_url_credentials(text: str) -> str:
    """``text`` with the user information of every URL in it replaced (``http://xxxxx@host``, ``user:xxxxx@host``),
    however the URL is mistyped: a password may hold ``/`` or ``@``, and a token may stand alone before the ``@``."""
    return _URL_USERINFO.sub(
        lambda m: f"{m['scheme']}xxxxx@" if m["scheme"] is not None else f"{m['user']}:xxxxx@", text
    )


class OtelBridgeError(Exception):
    """Base class of every error raised by otel-bridge. A URL's credentials never appear in its message.

    ``cause``: the lower-level exception behind an expected failure (an unreachable server), kept for debugging
    where the error is raised without chaining it, so its message is the one clear line a traceback ends with.
    """

    cause: BaseException | None = None

    def __init__(self, *args: Any) -> None:
        super().__init__(*(redact_url_credentials(a) if isinstance(a, str) else a for a in args))


class RedactedCauseError(OtelBridgeError):
    """A lower-level exception as chained to an otel-bridge error by :func:`redacted_cause`: its type and message with
    URL credentials replaced, raised at the same place (its traceback's frames)."""


_MAX_CHAIN = 16


def redacted_cause(err: BaseException, _depth: int = 0) -> BaseException:
    """What to chain (``raise ... from redacted_cause(err)``) for a library's exception ``err``: ``err`` itself when no
    message in its chain holds URL credentials, else a :class:`RedactedCauseError` naming its type and its message with
    them replaced, with its traceback and its own causes handled alike (an MLflow client built from
    ``http://user:password@host`` quotes that URL in every failure, and a trainer prints the whole chain)."""
    chained = err.__cause__ if err.__cause__ is not None else (None if err.__suppress_context__ else err.__context__)
    deeper = redacted_cause(chained, _depth + 1) if chained is not None and _depth < _MAX_CHAIN else None
    text = str(err)
    if deeper is chained and redact_url_credentials(text) == text:
        return err
    kind = type(err)
    cause = RedactedCauseError(f"{kind.__module__}.{kind.__qualname__}: {text}").with_traceback(err.__traceback__)
    cause.__cause__ = deeper
    cause.__suppress_context__ = True
    return cause


class ConfigError(OtelBridgeError, ValueError):
    """The configuration is invalid. The message names the key and what is allowed."""


class SourceError(OtelBridgeError):
    """An infrastructure source could not be read (Prometheus, a ``/metrics`` endpoint): what a producer reports
    when it cannot reach what it reads. At start-up the bridge decides what follows (``startup``: strict raises it,
    degrade starts without the source's metrics until it answers)."""


class PrometheusError(SourceError):
    """A request to the Prometheus HTTP API failed."""

    def __init__(self, message: str, *, url: str | None = None) -> None:
        super().__init__(message)
        self.url = url


class PrometheusUnreachableError(PrometheusError):
    """Prometheus could not be reached (connection refused, DNS, timeout), after retries."""


class PrometheusAPIError(PrometheusError):
    """Prometheus answered with ``status: error``; carries its ``errorType`` and ``error``."""

    def __init__(
        self,
        message: str,
        *,
        url: str | None = None,
        status_code: int | None = None,
        error_type: str | None = None,
        error: str | None = None,
    ) -> None:
        super().__init__(message, url=url)
        self.status_code = status_code
        self.error_type = error_type
        self.error = error


class PrometheusResponseError(PrometheusError):
    """The response is not a Prometheus API answer (HTML page, non-JSON, wrong shape)."""

    def __init__(self, message: str, *, url: str | None = None, status_code: int | None = None) -> None:
        super().__init__(message, url=url)
        self.status_code = status_code


class ResponseTooLargeError(PrometheusError):
    """The response body is larger than the configured cap."""

    def __init__(self, message: str, *, url: str | None = None, limit_bytes: int = 0) -> None:
        super().__init__(message, url=url)
        self.limit_bytes = limit_bytes


class QueryTooLongError(ConfigError):
    """A part of a step's query is longer than the store accepts in one query (VictoriaMetrics'
    ``-search.maxQueryLen``): no split of the union can send it, so the configured metrics and the store's limit do
    not fit together."""

    def __init__(self, message: str, *, size_bytes: int, limit_bytes: int) -> None:
        super().__init__(message)
        self.size_bytes = size_bytes
        self.limit_bytes = limit_bytes


class ScrapeError(SourceError):
    """A ``/metrics`` endpoint could not be read; ``refused``: its connection was refused (nothing listened at the
    address: no process serves that port)."""

    def __init__(self, message: str, *, url: str | None = None, refused: bool = False) -> None:
        super().__init__(message)
        self.url = url
        self.refused = refused


class ExpositionParseError(OtelBridgeError, ValueError):
    """Prometheus text exposition that cannot be parsed."""


class SampleLimitError(ExpositionParseError):
    """An exposition holds more samples of the wanted metrics than the caller's cap (parsing stopped there)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} samples of the configured metrics (parsing stopped there)")
        self.limit = limit


class DiscoveryError(SourceError):
    """Discovery found nothing usable. ``tried`` lists each source tried and what it found."""

    def __init__(self, message: str, *, tried: list[str] | None = None) -> None:
        self.tried = list(tried or [])
        if self.tried:
            message += "\ntried, in order:\n  - " + "\n  - ".join(self.tried)
        super().__init__(message)


class BackendError(OtelBridgeError):
    """A tracker backend failed to open or write."""


class BridgeClosedError(OtelBridgeError, RuntimeError):
    """The bridge was used after :meth:`Bridge.close`."""


class StepOrderError(OtelBridgeError, ValueError):
    """A step was logged out of order, twice, or while another step's window is open."""


class InvalidStepError(OtelBridgeError, TypeError, ValueError):
    """A step that is not an integer (``1.5``, ``"3"``, ``True``) or whose magnitude exceeds 2**53."""


class InvalidPhaseError(OtelBridgeError, TypeError, ValueError):
    """A phase name that is not a non-empty string (``bridge.phase(name)``, ``begin_phase``, ``end_phase``)."""


class ReservedKeyError(OtelBridgeError, ValueError):
    """A trainer metric named in the bridge's own ``otel_bridge/`` namespace (its health keys, wandb's step axis)."""


class DeliveryTimeoutError(OtelBridgeError, TimeoutError):
    """A step's record was not assembled and delivered within the timeout."""


class TrainingThreadError(OtelBridgeError, RuntimeError):
    """``step``/``log``/``phase``/``commit`` called from a second thread while the bridge's training thread (the first
    to call one of them) is alive: one bridge records one sequence of step windows."""
