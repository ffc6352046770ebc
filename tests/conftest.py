"""Shared fixtures: simulated vLLM servers and a real Prometheus scraping them."""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

from otel_bridge.tools.simulation.http import MetricsHTTPServer, MetricsRequest, MetricsRoute
from otel_bridge.tools.simulation.vllm import VLLMServer, VLLMSimulator
from tests.helpers.prometheus_server import PROMETHEUS_VERSIONS, PrometheusServer

pytest_plugins = [
    "tests.ray_fixtures",
    "tests.plugins.tiers",
    "tests.plugins.sleeps",
    "tests.plugins.machine",
    "tests.plugins.timeline",
]

# Property tests explore the same examples on every run (deterministic suite); no per-example deadline on 2 cores.
settings.register_profile("otel-bridge", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("otel-bridge")

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "vllm"  # copied from shared/fixtures/vllm (vLLM 0.32)


@dataclass(frozen=True, slots=True)
class Page:
    """One ``/metrics`` page a server rendered: for whom, when, and what it said of the counts a test checks."""

    arrived: float  # when its request was read (MetricsRequest.arrived): after the scraper sent it
    rendered: float  # time.time() once the page was rendered: after its counters were read
    accept: str
    user_agent: str  # who asked: "Prometheus/<version>", VictoriaMetrics' "vm_promscrape", the bridge's "otel-bridge"
    started: float | None  # its (first) process_start_time_seconds: which process of the server rendered it
    requests: float | None  # vllm:request_success_total, summed over its label values (None: not on the page)
    tokens: float | None  # vllm:generation_tokens_total, summed likewise


# The sample lines of the values a Page keeps, either name form (OpenMetrics escapes vLLM's colon for a 2.x Prometheus):
# ~50 us a page, against the ~7 ms a render takes.
_STARTED = re.compile(rb"\nprocess_start_time_seconds(?:\{\})?[ \t]+(\S+)")
_REQUESTS = re.compile(rb"\nvllm[:_]request_success_total(?:\{[^}\n]*\})?[ \t]+(\S+)")
_TOKENS = re.compile(rb"\nvllm[:_]generation_tokens_total(?:\{[^}\n]*\})?[ \t]+(\S+)")


def _summed(pattern: re.Pattern[bytes], body: bytes) -> float | None:
    values = pattern.findall(body)
    return sum(float(v) for v in values) if values else None


class Renders:
    """The ``/metrics`` pages a server rendered (a :class:`VLLMServer`'s ``on_render``): how many, and the last
    ``KEPT`` of them (:class:`Page`: when each was asked and rendered, for whom, and the counts it showed; a
    Prometheus asks for OpenMetrics first, the bridge for the text format); tests wait on them."""

    KEPT = 4096

    def __init__(self) -> None:
        self.count = 0
        self._served: deque[Page] = deque(maxlen=self.KEPT)
        self._cond = threading.Condition()

    def seen(self, body: bytes, request: MetricsRequest) -> None:
        rendered = time.time()
        started = _STARTED.search(body)
        page = Page(
            request.arrived,
            rendered,
            request.accept,
            request.user_agent,
            float(started.group(1)) if started else None,
            _summed(_REQUESTS, body),
            _summed(_TOKENS, body),
        )
        with self._cond:
            self.count += 1
            self._served.append(page)
            self._cond.notify_all()

    def pages(self, since: float = float("-inf")) -> list[Page]:
        """The pages whose requests arrived at or after ``since``, in the order they were rendered; fails when some
        of them may have been dropped (more than ``KEPT`` pages since)."""
        with self._cond:
            kept, count = list(self._served), self.count
        if count > len(kept) and kept and kept[0].rendered >= since:
            raise AssertionError(f"{count - len(kept)} pages rendered before {kept[0].rendered:.3f} are not kept")
        return [page for page in kept if page.arrived >= since]

    def wait_for(self, count: int, timeout_s: float = 10.0) -> None:
        """Block until ``count`` pages were rendered in all (fails after ``timeout_s``)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self.count >= count, timeout_s):
                raise AssertionError(f"{self.count} /metrics renders, expected {count}")

    def wait_after(self, t: float, by: Callable[[str], bool] = lambda accept: True, timeout_s: float = 10.0) -> None:
        """Block until a page was rendered after ``t`` (``time.time()``) for a scraper whose ``Accept`` header ``by``
        tells (any scraper by default; fails after ``timeout_s``)."""
        with self._cond:
            if not self._cond.wait_for(lambda: any(p.rendered > t and by(p.accept) for p in self._served), timeout_s):
                raise AssertionError(f"no /metrics render for that scraper after {t:.3f} within {timeout_s} s")


class Replica:
    """One simulated vLLM server (:class:`VLLMServer`): ``sim`` counts, ``server`` is its port alone (stop it for a
    network partition), ``process`` restarts it as vLLM restarts (``go_down``/``come_up``). ``route`` is how its
    ``/metrics`` answers: vLLM's own text route, or prometheus_client's negotiation (:func:`replica_routes`);
    ``renders`` the pages it served."""

    def __init__(self, model_name: str = "tiny", route: MetricsRoute = "text") -> None:
        self.sim = VLLMSimulator(model_name=model_name, engine="0")
        self.renders = Renders()
        self.process = VLLMServer(self.sim, on_render=self.renders.seen, route=route).start()
        self.server: MetricsHTTPServer = self.process.http

    @property
    def scrapes(self) -> int:
        """The scrapes it served in all."""
        return self.renders.count

    def wait_for_scrapes(self, count: int, timeout_s: float = 10.0) -> None:
        """Block until the endpoint has served ``count`` scrapes in all (fails after ``timeout_s``)."""
        self.renders.wait_for(count, timeout_s)

    @property
    def url(self) -> str:
        return self.process.url

    @property
    def hostport(self) -> str:
        return self.process.hostport

    def stop(self) -> None:
        self.process.stop()


def replica_routes(*prometheus_versions: str) -> tuple[MetricsRoute, MetricsRoute]:
    """The ``/metrics`` routes of two replicas scraped by a Prometheus of each of ``prometheus_versions``, so the
    suite's Prometheus tests meet both the text route real vLLM has and prometheus_client's negotiation.

    A Prometheus 3 asks for OpenMetrics with ``escaping=allow-utf-8`` and stores a negotiating exporter's ``vllm:x``
    as served; a Prometheus 2.x asks for OpenMetrics without it and stores ``vllm_x`` (prometheus_client >= 0.23
    escapes the colon on OpenMetrics sample lines), so a 2.42 pair holds each family under two names at once, which
    every plan reads (issue 35, point 3), the recording rules included: they select every name a family may be stored
    under. The same pair for every version (``prometheus_versions`` kept for the callers naming theirs).
    """
    del prometheus_versions
    return ("text", "negotiate")


WARM_AHEAD = 2  # pairs kept warming per Prometheus version: a run of quick tests (test_query's) takes them fast


class WarmPool:
    """Builds the next (two replicas, a Prometheus scraping them) pair of each Prometheus version in the background
    while a test runs.

    Prometheus starts scraping new targets only at its scrape manager's first reload tick (5 s), so a pair built when
    a test asks for it cost that test ~7 s; ~30 tests ask for one, once per version.
    """

    def __init__(self, root: Path) -> None:
        self._root = root
        self._built = 0
        self._executor = ThreadPoolExecutor(
            max_workers=WARM_AHEAD * len(PROMETHEUS_VERSIONS), thread_name_prefix="warm-prometheus"
        )
        self._warming: dict[str, deque[Future[tuple[list[Replica], PrometheusServer]]]] = {
            version: deque() for version in PROMETHEUS_VERSIONS
        }
        self._lock = threading.Lock()

    def _build(self, version: str) -> tuple[list[Replica], PrometheusServer]:
        with self._lock:
            self._built += 1
            number = self._built
        replicas: list[Replica] = []
        server: PrometheusServer | None = None
        try:
            replicas = [Replica(route=route) for route in replica_routes(version)]
            for attempt in range(3):  # its port was free a moment ago; a server started meanwhile may have taken it
                server = PrometheusServer(
                    self._root / f"prometheus-{number}-{attempt}",
                    [r.hostport for r in replicas],
                    scrape_interval_s=1.0,
                    version=version,
                )
                try:
                    server.start()
                    break
                except RuntimeError:
                    if attempt == 2:
                        raise
            assert server is not None
            server.wait_for_samples('{__name__=~"vllm.generation_tokens_total"}', count=2)  # either name
        except BaseException:
            stop_pair(replicas, server)
            raise
        return replicas, server

    def take(self, version: str) -> tuple[list[Replica], PrometheusServer]:
        """A ready pair of Prometheus ``version`` (built now if none is warm); keeps :data:`WARM_AHEAD` more warming."""
        warming = self._warming[version]
        if not warming:
            warming.append(self._executor.submit(self._build, version))
        ready = warming.popleft()
        while len(warming) < WARM_AHEAD:
            warming.append(self._executor.submit(self._build, version))
        return ready.result()

    def close(self) -> None:
        for warming in self._warming.values():
            for pair in warming:
                if pair.exception() is None:  # a failed build stopped what it started
                    stop_pair(*pair.result())
        self._executor.shutdown(wait=True)


def stop_pair(replicas: list[Replica], server: PrometheusServer | None) -> None:
    if server is not None:
        server.stop()
    for replica in replicas:
        replica.stop()


@pytest.fixture(scope="session")
def warm_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WarmPool]:
    pool = WarmPool(tmp_path_factory.mktemp("warm"))
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def _prometheus_pair(warm_pool: WarmPool, prometheus_version: str) -> Iterator[tuple[list[Replica], PrometheusServer]]:
    replicas, server = warm_pool.take(prometheus_version)
    try:
        yield replicas, server
    finally:
        stop_pair(replicas, server)


@pytest.fixture
def replicas(request: pytest.FixtureRequest) -> Iterator[list[Replica]]:
    """Two simulated vLLM replicas with identical labels (as a real deployment has); with ``prometheus``, the two it
    scrapes."""
    if "_prometheus_pair" in request.fixturenames:
        pair: tuple[list[Replica], PrometheusServer] = request.getfixturevalue("_prometheus_pair")
        yield pair[0]
        return
    started: list[Replica] = []
    try:
        for _ in range(2):
            started.append(Replica())
        yield started
    finally:
        for replica in started:
            replica.stop()


@pytest.fixture
def prometheus(_prometheus_pair: tuple[list[Replica], PrometheusServer]) -> PrometheusServer:
    """A real Prometheus scraping both replicas every second (ready: two samples of each, warmed in the background
    during an earlier test; its history may reach back before this test): the test runs once per version, Debian's
    2.42 and 3.16 built from its Go module."""
    return _prometheus_pair[1]


@pytest.fixture(params=PROMETHEUS_VERSIONS, ids=[f"prometheus-{version}" for version in PROMETHEUS_VERSIONS])
def prometheus_version(request: pytest.FixtureRequest) -> str:
    """The Prometheus version of a test that takes this fixture: it runs once per version, Debian's 2.42 and 3.16
    built from its Go module (``make peers``); pass it on as ``PrometheusServer(..., version=prometheus_version)``."""
    version: str = request.param
    return version
