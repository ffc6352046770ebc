"""The soak's scrape targets: simulated vLLM replicas, and ones that misbehave for a window of steps.

A :class:`TricklingTarget` serves its simulator's ``/metrics`` normally until ``faulty`` is set, then sends every
answer one byte every 2 s (a per-read timeout never fires). A :class:`RedirectingTarget` answers normally until
``faulty`` is set, then with a 302 in turn to itself (a redirect loop), to a port nothing listens on, and to a
malformed ``Location`` (``http://[::1``, issue 14 finding 2). Both run on :class:`ScriptedHTTPServer` from
``tests/helpers/http_servers.py``, the server the fault tests use.
"""

from __future__ import annotations

import itertools
import threading

from otel_bridge.tools.simulation.http import MetricsHTTPServer
from otel_bridge.tools.simulation.vllm import VLLMSimulator
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer, free_port

EXPOSITION = {"Content-Type": "text/plain; version=0.0.4"}
TRICKLE_S = 2.0


def generate(sim: VLLMSimulator, step: int) -> None:
    """One step of rollout traffic on ``sim``."""
    sim.complete_request(prompt_tokens=16, generation_tokens=4, ttft_s=0.02, e2e_s=0.05, queue_s=0.001, itl_s=0.002)
    sim.set_running(step % 7)


class Replica:
    """A simulated vLLM server and the HTTP endpoint serving it (stoppable and restartable on its port)."""

    def __init__(self) -> None:
        self.sim = VLLMSimulator(model_name="soak")
        self.server = MetricsHTTPServer(self.sim.exposition).start()
        self.up = True

    @property
    def hostport(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def set_up(self, up: bool) -> None:
        if up and not self.up:
            self.server.start()
        elif not up and self.up:
            self.server.stop()
        self.up = up


class MisbehavingTarget:
    """A ``/metrics`` endpoint serving its own simulator, misbehaving (:meth:`_misbehave`) while ``faulty`` is set."""

    def __init__(self, model_name: str) -> None:
        self.sim = VLLMSimulator(model_name=model_name)
        self.faulty = threading.Event()
        self.server = ScriptedHTTPServer(self._handle)
        self.hostport = self.server.url.split("//", 1)[1]
        self.url = f"{self.server.url}/metrics"

    def _handle(self, request: RecordedRequest) -> Response:
        if self.faulty.is_set():
            return self._misbehave(request)
        return Response(body=self.sim.exposition(), headers=EXPOSITION)

    def _misbehave(self, request: RecordedRequest) -> Response:
        raise NotImplementedError

    def close(self) -> None:
        self.server.close()


class TricklingTarget(MisbehavingTarget):
    """Trickles its answers (1 byte every 2 s) while ``faulty`` is set."""

    def __init__(self) -> None:
        super().__init__("soak-trickle")

    def _misbehave(self, request: RecordedRequest) -> Response:
        return Response(body=self.sim.exposition(), headers=EXPOSITION, trickle_s=TRICKLE_S)


class RedirectingTarget(MisbehavingTarget):
    """Answers with bad redirects while ``faulty`` is set, in turn: a loop, a dead port, a malformed ``Location``."""

    KINDS = ("loop", "dead-port", "malformed")

    def __init__(self) -> None:
        super().__init__("soak-redirect")
        self._dead = f"http://127.0.0.1:{free_port()}/metrics"
        self._kinds = itertools.cycle(self.KINDS)
        self._lock = threading.Lock()
        self.sent = dict.fromkeys(self.KINDS, 0)

    def _misbehave(self, request: RecordedRequest) -> Response:
        if request.query.get("hop"):  # one hop of a loop: send it round again
            return Response(status=302, headers={"Location": f"{self.url}?hop=1"})
        with self._lock:
            kind = next(self._kinds)
            self.sent[kind] += 1
        location = {"loop": f"{self.url}?hop=1", "dead-port": self._dead, "malformed": "http://[::1"}[kind]
        return Response(status=302, headers={"Location": location})
