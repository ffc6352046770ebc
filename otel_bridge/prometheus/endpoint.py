"""Reading one ``/metrics`` endpoint over HTTP, with a timeout and a cap on the body size."""

from __future__ import annotations

import requests

from otel_bridge.errors import ScrapeError

ACCEPT = "text/plain;version=0.0.4;q=1.0, */*;q=0.1"


class MetricsEndpoint:
    """A ``/metrics`` URL, read with a ``requests.Session`` of its own (sessions are not shared across threads)."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 5.0,
        max_response_bytes: int = 20_000_000,
        verify: bool | str = True,
        cert: tuple[str, str] | str | None = None,
    ) -> None:
        self.url = url
        self._timeout_s = timeout_s
        self._max_bytes = max_response_bytes
        self._session = requests.Session()
        self._session.verify = verify
        if cert is not None:
            self._session.cert = cert
        self._session.headers.update({"Accept": ACCEPT, "User-Agent": "otel-bridge"})

    def __repr__(self) -> str:
        return f"MetricsEndpoint({self.url!r})"

    def fetch(self) -> str:
        """The exposition text; :class:`ScrapeError` saying what failed (connection, status, size, encoding)."""
        try:
            with self._session.get(self.url, timeout=self._timeout_s, stream=True) as response:
                if response.status_code != 200:
                    raise ScrapeError(
                        f"scraping {self.url} failed: HTTP {response.status_code}; check that this is a /metrics URL",
                        url=self.url,
                    )
                body = bytearray()
                for chunk in response.iter_content(chunk_size=65536):
                    body.extend(chunk)
                    if len(body) > self._max_bytes:
                        raise ScrapeError(
                            f"scraping {self.url} failed: body larger than {self._max_bytes} bytes; "
                            "raise scrape.max_response_bytes if this endpoint is legitimately that large",
                            url=self.url,
                        )
        except requests.RequestException as exc:
            raise ScrapeError(
                f"scraping {self.url} failed: {type(exc).__name__}: {exc}; check that the server is up",
                url=self.url,
            ) from None
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError:
            raise ScrapeError(f"scraping {self.url} failed: the body is not UTF-8 text", url=self.url) from None

    def close(self) -> None:
        """Close the HTTP session."""
        self._session.close()
