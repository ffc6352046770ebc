"""Reading one ``/metrics`` endpoint over HTTP, through the bridge's one transport (deadline, body cap, TLS)."""

from __future__ import annotations

from otel_bridge.errors import ScrapeError
from otel_bridge.http.transport import Transport, TransportError, TransportOptions

ACCEPT = "text/plain;version=0.0.4;q=1.0, */*;q=0.1"
ENDPOINT_DEFAULTS = TransportOptions(timeout_s=5.0, max_response_bytes=20_000_000)
"""A scrape's deadline and body cap when none are given (``scrape.timeout_s`` and ``scrape.max_response_bytes``
set them in a run), no retries, TLS verified, no credentials."""

# What a failure of these kinds says, with the key or the place to fix.
_FAILURES = {
    "too_large": "body larger than {limit} bytes ({reason}); raise scrape.max_response_bytes if this endpoint is "
    "legitimately that large",
    "redirects": "{reason}; list the final /metrics URL in scrape.targets",
    "cut_off": "the answer was cut off after {reason} bytes; check the server and any proxy in between",
    "undecodable": "the answer could not be decompressed ({reason}); check any proxy in between",
    "malformed": "the answer is not valid HTTP ({reason}); check that this is a /metrics URL",
}


class MetricsEndpoint:
    """A ``/metrics`` URL, read with a transport of its own (one connection pool per endpoint, no retries: the
    next scrape is the retry). Each read, connect to last body byte, ends within ``transport.timeout_s``; its
    credentials (``scrape.auth``) authenticate every request and are never echoed."""

    def __init__(self, url: str, transport: TransportOptions = ENDPOINT_DEFAULTS) -> None:
        self.url = url
        self._transport = Transport(transport, headers={"Accept": ACCEPT, "User-Agent": "otel-bridge"})

    def __repr__(self) -> str:
        return f"MetricsEndpoint({self.url!r})"

    def fetch(self) -> str:
        """The exposition text; :class:`ScrapeError` saying what failed (connection, status, size, encoding)."""
        try:
            answer = self._transport.get(self.url)
        except TransportError as exc:
            message = f"scraping {self.url} failed: {self._failure(exc)}"
            raise ScrapeError(message, url=self.url, refused=exc.refused) from None
        if answer.status in (401, 403):
            raise ScrapeError(
                f"scraping {self.url} failed: HTTP {answer.status}; the target wants credentials: check scrape.auth",
                url=self.url,
            )
        if answer.status != 200:
            raise ScrapeError(
                f"scraping {self.url} failed: HTTP {answer.status}; check that this is a /metrics URL", url=self.url
            )
        try:
            return answer.body.decode("utf-8")
        except UnicodeDecodeError:
            raise ScrapeError(f"scraping {self.url} failed: the body is not UTF-8 text", url=self.url) from None

    def close(self) -> None:
        """Close the HTTP connections."""
        self._transport.close()

    def _failure(self, exc: TransportError) -> str:
        """What went wrong and which ``scrape`` key or server to fix."""
        if exc.kind in _FAILURES:
            return _FAILURES[exc.kind].format(reason=exc.reason, limit=self._transport.max_response_bytes)
        if exc.tls == "verify":
            return f"{exc.reason}; set scrape.tls.ca_file to the CA bundle that signed its certificate"
        if exc.tls == "handshake":
            return f"{exc.reason}; check the URL's scheme and scrape.tls.cert_file / scrape.tls.key_file"
        if exc.timed_out:
            return f"{exc.reason}; check that the server is up, or raise scrape.timeout_s"
        return f"{exc.reason}; check that the server is up"
