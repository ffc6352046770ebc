"""A tiny ``/metrics`` HTTP server on a background thread, serving whatever a callable renders, plus the few other
routes a simulated server answers (vLLM's ``POST /sleep``...).

What a ``/metrics`` answer looks like depends on the exporter's route, and on the scraper's ``Accept`` header where the
route negotiates (:func:`exposition`): prometheus_client's own handlers (``start_http_server``, ``make_wsgi_app``,
``make_asgi_app``: SGLang's route) answer OpenMetrics to a scraper that asks for it, vLLM's route answers text whatever
it is asked (docs/compatibility.md). What serves the page is told the request it answers (:class:`MetricsRequest`: when
it arrived, and who asked), so a test can tell its scrapers apart.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Final, Literal

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

_log = logging.getLogger(__name__)

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
_POLL_INTERVAL_S: Final = 0.05  # how often serve_forever checks for shutdown: bounds stop() latency
Route = Callable[[Mapping[str, str]], tuple[int, bytes]]
"""A route's handler: the request's query parameters -> (status, JSON body)."""


@dataclass(frozen=True, slots=True)
class MetricsRequest:
    """One ``GET /metrics`` as the server read it, before its page is rendered."""

    arrived: float
    """``time.time()`` once its request line and headers were read: after the scraper sent it."""
    accept: str = ""
    """Its ``Accept`` header (``""`` when it sent none)."""
    user_agent: str = ""
    """Its ``User-Agent`` header (``""`` when it sent none): who asked (``Prometheus/<version>``, VictoriaMetrics'
    ``vm_promscrape``, the bridge's ``otel-bridge``)."""


Render = Callable[[MetricsRequest], tuple[bytes, str]]
"""What ``GET /metrics`` serves: the request (its ``Accept`` header, ...) -> (body, ``Content-Type``)."""
MetricsRoute = Literal["negotiate", "text"]
"""How an exporter's ``/metrics`` route answers (:func:`exposition`)."""
METRICS_ROUTES: Final[tuple[MetricsRoute, ...]] = ("negotiate", "text")


def exposition(registry: Collector, accept: str, route: MetricsRoute) -> tuple[bytes, str]:
    """``registry``'s ``/metrics`` answer to a scraper sending ``accept``, as the exporter's ``route`` gives it.

    - ``negotiate``: prometheus_client's own content negotiation (``choose_encoder``, what its ``make_wsgi_app``,
      ``make_asgi_app`` and ``start_http_server`` use): OpenMetrics to a scraper that asks for it, with the names
      escaped as the ``escaping`` it asks for allows (prometheus_client >= 0.23 escapes the colon of ``vllm:x`` on
      OpenMetrics sample lines unless the scraper accepts ``escaping=allow-utf-8``), else the text format.
    - ``text``: vLLM's route (``prometheus_fastapi_instrumentator``'s ``expose``): ``generate_latest`` with
      ``CONTENT_TYPE_LATEST`` (``text/plain; version=1.0.0`` from prometheus_client 0.22 on), whatever is asked.

    Compression (both routes gzip when asked) is left out: it changes no name or value.
    """
    if route == "negotiate":
        encoder, content_type = choose_encoder(accept)
        return bytes(encoder(registry)), content_type
    return bytes(generate_latest(registry)), CONTENT_TYPE_LATEST


def fixed_text(render: Callable[[], bytes]) -> Render:
    """A ``/metrics`` page rendered without looking at the request: the text format 0.0.4, whatever is asked."""
    return lambda request: (render(), CONTENT_TYPE)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], render: Render, routes: Mapping[tuple[str, str], Route]) -> None:
        super().__init__(address, _Handler)
        self.render = render
        self.routes = routes

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up before the answer (a scrape that timed out, a scraper that exited) is routine for a
        server: logged at debug level instead of socketserver's traceback on stderr."""
        if isinstance(sys.exc_info()[1], ConnectionError):  # BrokenPipeError, ConnectionResetError, ...
            _log.debug("client %s went away before the answer", client_address)
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        if self._route("GET"):
            return
        if self.path.split("?", 1)[0] != "/metrics":
            self._send(404, b"not found: this server only serves /metrics\n", "text/plain; charset=utf-8")
            return
        request = MetricsRequest(time.time(), self.headers.get("Accept", ""), self.headers.get("User-Agent", ""))
        try:
            body, content_type = self.server.render(request)
        except Exception:  # noqa: BLE001 - a failing render must answer 500, not kill the handler thread silently
            _log.exception("rendering /metrics failed")
            self._send(500, b"rendering /metrics failed\n", "text/plain; charset=utf-8")
            return
        self._send(200, body, content_type)

    def do_POST(self) -> None:
        if not self._route("POST"):
            self._send(404, b"not found\n", "text/plain; charset=utf-8")

    def _route(self, method: str) -> bool:
        path, _, query = self.path.partition("?")
        route = self.server.routes.get((method, path))
        if route is None:
            return False
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        params = {name: values[-1] for name, values in urllib.parse.parse_qs(query).items()}
        status, body = route(params)
        self._send(status, body, "application/json")
        return True

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("%s - " + format, self.address_string(), *args)


class MetricsHTTPServer:
    """Serves ``render()`` (the text format 0.0.4, whatever the scraper asks) or ``answer(request)`` (a
    :data:`Render`, told the :class:`MetricsRequest`: e.g. :func:`exposition`'s negotiation on its ``accept``) at
    ``GET /metrics``, and each of ``routes`` (``(method, path) ->`` :data:`Route`), from a daemon thread (404
    elsewhere). Exactly one of ``render`` and ``answer``.

    ``port=0`` picks a free port; :attr:`url` tells which. Use as a context manager, or call :meth:`start` and
    :meth:`stop` (prompt: it returns once the serving thread has exited and the socket is closed). After
    :meth:`stop`, :meth:`start` serves again on the same port, which simulates an endpoint going down and up.
    """

    def __init__(
        self,
        render: Callable[[], bytes] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        routes: Mapping[tuple[str, str], Route] | None = None,
        *,
        answer: Render | None = None,
    ) -> None:
        if render is not None and answer is None:
            answer = fixed_text(render)
        elif render is not None or answer is None:
            raise ValueError("MetricsHTTPServer needs exactly one of render (a fixed text page) and answer (by Accept)")
        self._render = answer
        self._routes = dict(routes or {})
        self._host = host
        self._port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (the requested one before the first :meth:`start`)."""
        return self._server.server_address[1] if self._server is not None else self._port

    @property
    def url(self) -> str:
        """``http://HOST:PORT/metrics``; call after :meth:`start` when the port was 0."""
        return f"http://{self._host}:{self.port}/metrics"

    def start(self) -> MetricsHTTPServer:
        """Bind and start serving; returns ``self``. Raises ``OSError`` if the port cannot be bound."""
        if self._server is not None:
            raise RuntimeError(f"MetricsHTTPServer at {self.url} is already started; call stop() first")
        server = _Server((self._host, self._port), self._render, self._routes)
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": _POLL_INTERVAL_S},
            name=f"metrics-http-{server.server_address[1]}",
            daemon=True,
        )
        self._server, self._thread = server, thread
        thread.start()
        _log.debug("serving %s", self.url)
        return self

    def stop(self) -> None:
        """Stop serving and close the socket. Idempotent."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.shutdown()
        server.server_close()
        thread.join()
        self._port = server.server_address[1]  # a later start() serves on the same port again
        self._server = self._thread = None
        _log.debug("stopped %s", self.url)

    def __enter__(self) -> MetricsHTTPServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
