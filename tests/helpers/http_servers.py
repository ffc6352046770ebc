"""A real, scriptable HTTP server for fault-injection tests.

:class:`ScriptedHTTPServer` listens on ``127.0.0.1`` (a free port chosen by the OS), answers every request
by calling a handler you supply, and records what it received. The handler returns a :class:`Response`
that can also misbehave on purpose: answer late, drop the connection, never answer, or send a truncated
body. Use it wherever a test needs a real socket instead of a mock::

    from tests.helpers.http_servers import ScriptedHTTPServer, json_response, prom_vector, sequence

    with ScriptedHTTPServer(lambda req: prom_vector([({"job": "vllm"}, 1.0)])) as server:
        client = client_for(PrometheusConfig(), server.url)
        ...
        assert server.requests[0].path == "/api/v1/query"

    # 503 once, then a successful answer for every later request
    handler = sequence(Response(status=503), prom_vector([]))

The server starts in the constructor (``.url`` is usable immediately) and :meth:`ScriptedHTTPServer.close`
(also called on leaving the ``with`` block) returns promptly even while handlers hang or delay: they wait
on an event that ``close()`` sets, and open keep-alive connections are shut down.

Optionally pass ``ssl_context`` (a server-side :class:`ssl.SSLContext`) to serve HTTPS; ``.url`` then
starts with ``https://``. :func:`make_self_signed_cert` (needs the ``openssl`` command) and
:func:`server_ssl_context` build one::

    files = make_self_signed_cert(tmp_path)
    with ScriptedHTTPServer(handler, ssl_context=server_ssl_context(files)) as server:
        client_for(PrometheusConfig(tls={"ca_file": files.cert}), server.url)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import requests

__all__ = [
    "Forward",
    "RecordedRequest",
    "Response",
    "ScriptedHTTPServer",
    "TLSFiles",
    "forwarding_proxy",
    "free_port",
    "html_response",
    "json_response",
    "make_self_signed_cert",
    "prom_error",
    "prom_matrix",
    "prom_scalar",
    "prom_string",
    "prom_success",
    "prom_vector",
    "redirect_response",
    "sequence",
    "server_ssl_context",
]

#: Default evaluation timestamp used by the ``prom_*`` helpers.
DEFAULT_TS = 1717171717.123


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it.

    ``headers`` has lower-cased names. ``query`` is the parsed URL query string and ``form`` the parsed
    ``application/x-www-form-urlencoded`` body (empty for other content types); both map a name to the
    list of its values.
    """

    method: str
    path: str
    query: dict[str, list[str]]
    body: bytes
    headers: dict[str, str]

    @property
    def form(self) -> dict[str, list[str]]:
        """The body parsed as a URL-encoded form (empty if the body is not a form)."""
        content_type = self.headers.get("content-type", "")
        if not content_type.startswith("application/x-www-form-urlencoded"):
            return {}
        return parse_qs(self.body.decode("utf-8"), keep_blank_values=True)

    def param(self, name: str) -> str | None:
        """The single value of ``name`` from the query string or the form body, or ``None`` if absent."""
        values = self.query.get(name) or self.form.get(name)
        if not values:
            return None
        if len(values) != 1:
            raise AssertionError(f"parameter {name!r} was sent {len(values)} times: {values!r}")
        return values[0]


@dataclass
class Response:
    """What the server does with one request.

    ``status``/``body``/``headers`` form a normal answer (``Content-Length`` is added unless ``chunked``).
    Misbehaviours, applied after ``delay_s``:

    * ``drop_connection``: close the socket without sending anything.
    * ``hang``: never answer; the handler waits until the server is closed.
    * ``truncate_after``: announce the full ``Content-Length`` but send only the first N body bytes, then
      close the connection.
    * ``chunked``: send the body with ``Transfer-Encoding: chunked`` and no ``Content-Length``.
    * ``trickle_s``: send the answer one byte every ``trickle_s`` seconds, from its status line on (or from the body
      on, with ``trickle_body_only``), until it is complete, the client goes away or the server closes.
    """

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    drop_connection: bool = False
    hang: bool = False
    truncate_after: int | None = None
    chunked: bool = False
    trickle_s: float = 0.0
    trickle_body_only: bool = False


Handler = Callable[[RecordedRequest], Response]


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago (nothing listens on it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ScriptedHTTPServer:
    """A threaded HTTP/1.1 server on 127.0.0.1 that answers with ``handler(request)``.

    Attributes: ``url`` (``http://127.0.0.1:<port>``), ``port``, ``requests`` (a snapshot list of
    :class:`RecordedRequest`, in arrival order) and ``handler_errors`` (tracebacks of handlers that raised;
    such requests are answered with a 500).
    """

    def __init__(self, handler: Handler, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self._handler = handler
        self._lock = threading.Condition()  # notified at each recorded request
        self._requests: list[RecordedRequest] = []
        self._errors: list[str] = []
        self._connections: set[socket.socket] = set()
        self._connection_errors: list[str] = []
        self._stop = threading.Event()
        self._httpd = _Server(self, _make_request_handler(self))
        if ssl_context is not None:
            # The TLS handshake runs in the handler thread (see _Handler.setup), not in the accept loop.
            self._httpd.socket = ssl_context.wrap_socket(
                self._httpd.socket, server_side=True, do_handshake_on_connect=False
            )
        self.port: int = self._httpd.server_address[1]
        scheme = "https" if ssl_context is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            name=f"scripted-http-{self.port}",
            daemon=True,
        )
        self._thread.start()
        self._closed = False

    @property
    def requests(self) -> list[RecordedRequest]:
        """The requests received so far, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    def wait_for_requests(self, count: int, timeout_s: float = 10.0) -> None:
        """Block until ``count`` requests were received in all (fails after ``timeout_s``)."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self._requests) >= count, timeout_s):
                raise AssertionError(f"{len(self._requests)} requests, expected {count}")

    @property
    def handler_errors(self) -> list[str]:
        """Tracebacks of handler calls that raised (a copy)."""
        with self._lock:
            return list(self._errors)

    @property
    def connection_errors(self) -> list[str]:
        """Tracebacks of connection-level failures (client hung up, TLS handshake refused), a copy.

        Fault tests provoke these on purpose, so they are recorded instead of printed.
        """
        with self._lock:
            return list(self._connection_errors)

    @property
    def stopping(self) -> threading.Event:
        """Set when :meth:`close` starts; hanging and delayed responses wait on it."""
        return self._stop

    def close(self) -> None:
        """Stop serving, release hanging handlers and shut open connections down. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            # The peer or the handler may have closed it already.
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)

    def __enter__(self) -> ScriptedHTTPServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ScriptedHTTPServer(url={self.url!r}, requests={len(self.requests)})"

    # Called from handler threads.
    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)
            self._lock.notify_all()

    def _record_error(self, text: str) -> None:
        with self._lock:
            self._errors.append(text)

    def _record_connection_error(self, text: str) -> None:
        with self._lock:
            self._connection_errors.append(text)

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def _respond(self, request: RecordedRequest) -> Response:
        try:
            return self._handler(request)
        except Exception:  # noqa: BLE001 - a broken test handler must surface as a 500 and be recorded
            text = traceback.format_exc()
            self._record_error(text)
            return Response(status=500, body=f"test handler raised:\n{text}".encode(), headers={})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, owner: ScriptedHTTPServer, handler_class: type[BaseHTTPRequestHandler]) -> None:
        self._owner = owner
        super().__init__(("127.0.0.1", 0), handler_class)

    def handle_error(self, request: Any, client_address: Any) -> None:
        self._owner._record_connection_error(traceback.format_exc())


def _make_request_handler(server: ScriptedHTTPServer) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in separate writes; with Nagle on, each answer waits ~40ms for an ACK.
        disable_nagle_algorithm = True
        # Bounds how long an idle keep-alive connection keeps its thread alive.
        timeout = 30

        def setup(self) -> None:
            super().setup()  # applies `timeout` to the socket
            server._track(self.connection, add=True)
            if isinstance(self.connection, ssl.SSLSocket):
                self.connection.do_handshake()

        def finish(self) -> None:
            server._track(self.connection, add=False)
            # The client may have gone away mid-write (e.g. after its timeout): nothing left to flush.
            with contextlib.suppress(OSError):
                super().finish()

        def log_message(self, format: str, *args: Any) -> None:
            return  # keep test output clean; requests are recorded instead

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            request = RecordedRequest(
                method=self.command,
                path=parts.path,
                query=parse_qs(parts.query, keep_blank_values=True),
                body=body,
                headers={name.lower(): value for name, value in self.headers.items()},
            )
            server._record(request)
            response = server._respond(request)
            if response.delay_s > 0 and server.stopping.wait(response.delay_s):
                self.close_connection = True
                return
            if response.hang:
                server.stopping.wait()
                self.close_connection = True
                return
            if response.drop_connection:
                self.close_connection = True
                return
            if response.trickle_s > 0:
                self._trickle(response)
                return
            self._send(response)

        def _trickle(self, response: Response) -> None:
            self.close_connection = True
            head = [f"HTTP/1.1 {response.status} {self.responses.get(response.status, ('',))[0]}\r\n"]
            headers = {**response.headers, "Content-Length": str(len(response.body)), "Connection": "close"}
            head += [f"{name}: {value}\r\n" for name, value in headers.items()]
            raw_head = ("".join(head) + "\r\n").encode("latin-1")
            at_once = raw_head if response.trickle_body_only else b""
            rest = (raw_head + response.body)[len(at_once) :]
            try:
                self.wfile.write(at_once)
                self.wfile.flush()
                for index in range(len(rest)):
                    if server.stopping.wait(response.trickle_s if index else 0):
                        return
                    self.wfile.write(rest[index : index + 1])
                    self.wfile.flush()
            except OSError:
                return  # the client gave up

        def _send(self, response: Response) -> None:
            self.send_response(response.status)
            for name, value in response.headers.items():
                self.send_header(name, value)
            if response.chunked:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for start in range(0, len(response.body), 8192):
                    chunk = response.body[start : start + 8192]
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
                return
            self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            if response.truncate_after is not None:
                self.wfile.write(response.body[: response.truncate_after])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(response.body)

        def do_GET(self) -> None:
            self._handle()

        def do_POST(self) -> None:
            self._handle()

        def do_PUT(self) -> None:
            self._handle()

        def do_DELETE(self) -> None:
            self._handle()

    return _Handler


Forward = Callable[[], Response]
"""Sends the request being answered on to the upstream and returns its answer."""


def forwarding_proxy(
    upstream: str, answer: Callable[[RecordedRequest, Forward], Response] | None = None
) -> ScriptedHTTPServer:
    """A real HTTP reverse proxy in front of ``upstream`` (e.g. a real Prometheus): each request is answered by
    ``answer(request, forward)``, which may answer itself, forward it, or change what the upstream answered (a gateway
    that adds paths, a store that lies); by default forwarded as is. Records every request, as any scripted server."""
    local = threading.local()  # a session per handler thread: concurrent requests go out concurrently

    def forwarded(request: RecordedRequest) -> Response:
        session = getattr(local, "session", None)
        if session is None:
            session = local.session = requests.Session()
        reply = session.request(
            request.method,
            upstream + request.path,
            params=request.query,
            data=request.body or None,
            headers={"Content-Type": request.headers.get("content-type", "")} if request.body else None,
            timeout=60,
        )
        return Response(
            status=reply.status_code,
            body=reply.content,
            headers={"Content-Type": reply.headers.get("Content-Type", "application/json")},
        )

    if answer is None:
        return ScriptedHTTPServer(forwarded)
    respond = answer
    return ScriptedHTTPServer(lambda request: respond(request, lambda: forwarded(request)))


def sequence(*responses: Response) -> Handler:
    """A handler answering the N-th request with the N-th response; the last one repeats forever."""
    if not responses:
        raise ValueError("sequence() needs at least one Response")
    lock = threading.Lock()
    count = 0

    def handler(_request: RecordedRequest) -> Response:
        nonlocal count
        with lock:
            index = min(count, len(responses) - 1)
            count += 1
        return responses[index]

    return handler


def json_response(obj: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    """A JSON answer (``Content-Type: application/json``)."""
    merged = {"Content-Type": "application/json"}
    merged.update(headers or {})
    return Response(status=status, body=json.dumps(obj).encode(), headers=merged)


def html_response(html: str, status: int = 502) -> Response:
    """An HTML page, the way a reverse proxy or a login page answers."""
    return Response(status=status, body=html.encode(), headers={"Content-Type": "text/html; charset=utf-8"})


def redirect_response(location: str, status: int = 302) -> Response:
    """A redirect to ``location``."""
    return Response(status=status, headers={"Location": location})


def prom_success(data: Any, *, warnings: Sequence[str] = ()) -> Response:
    """A Prometheus API success envelope around ``data``."""
    envelope: dict[str, Any] = {"status": "success", "data": data}
    if warnings:
        envelope["warnings"] = list(warnings)
    return json_response(envelope)


def prom_error(error_type: str, error: str, status: int = 400) -> Response:
    """A Prometheus API error envelope (e.g. ``bad_data``/400, ``execution``/422, ``timeout``/503)."""
    return json_response({"status": "error", "errorType": error_type, "error": error}, status=status)


def prom_vector(samples: Iterable[tuple[Mapping[str, str], float | str]], *, ts: float = DEFAULT_TS) -> Response:
    """An instant-vector answer; each sample is ``(labels, value)``, a value may be a string like "NaN"."""
    result = [{"metric": dict(labels), "value": [ts, _sample_value(value)]} for labels, value in samples]
    return prom_success({"resultType": "vector", "result": result})


def prom_matrix(series: Iterable[tuple[Mapping[str, str], Sequence[tuple[float, float | str]]]]) -> Response:
    """A range-vector answer; each series is ``(labels, [(ts, value), ...])``."""
    result = [
        {"metric": dict(labels), "values": [[ts, _sample_value(v)] for ts, v in points]} for labels, points in series
    ]
    return prom_success({"resultType": "matrix", "result": result})


def prom_scalar(value: float | str, *, ts: float = DEFAULT_TS) -> Response:
    """A scalar answer."""
    return prom_success({"resultType": "scalar", "result": [ts, _sample_value(value)]})


def prom_string(value: str, *, ts: float = DEFAULT_TS) -> Response:
    """A string answer."""
    return prom_success({"resultType": "string", "result": [ts, value]})


def _sample_value(value: float | str) -> str:
    """Prometheus sends sample values as strings (``"1.5"``, ``"NaN"``, ``"+Inf"``)."""
    if isinstance(value, str):
        return value
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


@dataclass(frozen=True)
class TLSFiles:
    """PEM paths of a certificate and its private key."""

    cert: str
    key: str


def make_self_signed_cert(directory: str | os.PathLike[str], name: str = "server") -> TLSFiles:
    """Write a self-signed EC certificate valid for ``127.0.0.1`` and ``localhost`` into ``directory``.

    The certificate is its own CA, so it can serve as a client's ``ca_file`` and also as a client
    certificate that a server trusts. Needs the ``openssl`` command line tool (raises ``RuntimeError``
    without it; tests should skip then).
    """
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("the openssl command line tool is not installed")
    cert = os.path.join(directory, f"{name}.crt")
    key = os.path.join(directory, f"{name}.key")
    command = [
        *(openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
        *("-keyout", key, "-out", cert, "-days", "2", "-subj", f"/CN={name}"),
        *("-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
    ]
    subprocess.run(
        command,
        check=True,
        capture_output=True,
    )
    return TLSFiles(cert=cert, key=key)


def server_ssl_context(files: TLSFiles, *, client_ca: str | None = None) -> ssl.SSLContext:
    """A server-side TLS context for ``files``; with ``client_ca`` clients must present a certificate
    signed by it (mutual TLS)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(files.cert, files.key)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(client_ca)
    return context
