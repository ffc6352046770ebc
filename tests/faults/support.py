"""Shared pieces of the fault suite: config builders, log counting. The backend double is tests/helpers/backends.py."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests

from otel_bridge import Bridge
from tests.helpers.backends import BackendDouble
from tests.helpers.http_servers import Forward, RecordedRequest, Response, ScriptedHTTPServer, forwarding_proxy
from tests.helpers.prometheus_server import PrometheusServer


def base_config(tmp_path: Path, name: str, **sections: Any) -> dict[str, Any]:
    """A config writing JSONL under ``tmp_path/name`` with fast warnings off (60 s rate limit, the default)."""
    return {"run": {"name": name, "dir": str(tmp_path)}, **sections}


def count_logs(caplog: pytest.LogCaptureFixture, text: str, level: int = logging.WARNING) -> int:
    """How many captured records at ``level`` or above contain ``text`` in their message."""
    return sum(1 for r in caplog.records if r.levelno >= level and text in r.getMessage())


def rollout_keys(values: dict[str, float]) -> list[str]:
    """The infrastructure keys of a record."""
    return [k for k in values if k.startswith("rollout/")]


def run_steps(bridge: Bridge, steps: int, *, collect: bool = False, seconds: float = 0.0, first: int = 0) -> None:
    """Steps ``first .. first+steps-1``, each a ``with bridge.step(n)`` block logging ``actor/loss = n`` (and lasting
    ``seconds``: scrapes of a store inside each window); with ``collect``, each step's record is waited for before the
    next step begins."""
    for step in range(first, first + steps):
        with bridge.step(step):
            bridge.log({"actor/loss": float(step)}, step=step)
            if seconds:
                time.sleep(seconds)
        if collect:
            bridge.collect(step)


class ScrapedPage:
    """A real local ``/metrics`` page whose body :meth:`page` writes from what the test set; counts the scrapes."""

    def __init__(self) -> None:
        self.scrapes = 0
        self._lock = threading.Lock()
        self.server = ScriptedHTTPServer(self._answer)

    def page(self) -> str:
        """The exposition text served now (called under the page's lock)."""
        raise NotImplementedError

    def _answer(self, request: RecordedRequest) -> Response:
        with self._lock:
            self.scrapes += 1
            body = self.page()
        return Response(body=body.encode(), headers={"Content-Type": "text/plain; version=0.0.4"})

    def wait_for_scrapes(self, count: int, timeout_s: float = 10.0) -> None:
        """Until the page has answered ``count`` scrapes (the boundary scrape runs on the bridge's sampler)."""
        deadline = time.monotonic() + timeout_s
        while self.scrapes < count:
            assert time.monotonic() < deadline, f"{self.scrapes} scrapes, expected {count}"
            time.sleep(0.005)


class CounterServer(ScrapedPage):
    """Serves the counter ``name`` (labelled ``model_name="m"``) with whatever value the test sets."""

    def __init__(self, name: str = "vllm:generation_tokens_total") -> None:
        self.name = name
        self.value = 0.0
        super().__init__()

    def page(self) -> str:
        return f'# TYPE {self.name} counter\n{self.name}{{model_name="m"}} {self.value!r}\n'

    def set(self, value: float) -> None:
        with self._lock:
            self.value = value


class CountingServer(CounterServer):
    """A counter that grows by 10 at every scrape, so every window has an increase."""

    def page(self) -> str:
        self.value += 10.0
        return super().page()


def collect_steps(
    config: dict[str, Any], steps: int, *, seconds: float, caplog: pytest.LogCaptureFixture
) -> tuple[BackendDouble, Bridge]:
    """A bridge built from ``config`` runs ``steps`` steps of ``seconds`` each (:func:`run_steps`, every record waited
    for) with its WARNINGs captured; returns the backend that received the records and the closed bridge (its health
    counters stay readable)."""
    collecting = BackendDouble()
    with (
        caplog.at_level(logging.WARNING, logger="otel_bridge"),
        Bridge.from_config(config, backends=[collecting]) as bridge,
    ):
        run_steps(bridge, steps, collect=True, seconds=seconds)
    return collecting, bridge


@contextmanager
def prometheus_scraping(
    workdir: Path,
    page: ScrapedPage,
    name: str,
    *,
    version: str,
    series: int = 1,
    rules: dict[str, Any] | None = None,
    enable_lifecycle: bool = False,
    timeout_s: float = 30.0,
) -> Iterator[PrometheusServer]:
    """A real Prometheus ``version`` scraping ``page`` every 0.25 s (running ``rules``, a rule file's content;
    ``POST /-/reload`` with ``enable_lifecycle``), once it holds ``series`` series of ``name``; Prometheus and the
    page are stopped on leaving, also when the test fails."""
    target = f"127.0.0.1:{page.server.port}"
    prometheus = PrometheusServer(
        workdir, [target], scrape_interval_s=0.25, rules=rules, version=version, enable_lifecycle=enable_lifecycle
    )
    try:
        prometheus.start()
        deadline = time.monotonic() + timeout_s
        query = {"query": f'{{__name__="{name}"}}'}
        while True:
            answer = requests.get(f"{prometheus.url}/api/v1/query", params=query, timeout=5).json()
            if len(answer["data"]["result"]) >= series:
                break
            assert time.monotonic() < deadline, f"Prometheus has no {series} series of {name} after {timeout_s}s"
            time.sleep(0.2)
        yield prometheus
    finally:
        prometheus.stop()
        page.server.close()


class RewrittenIncreases:
    """A reverse proxy's script: every window increase a store answers (a series tagged ``.../increase/...``) becomes
    ``rewrite(value)``; every other answer is forwarded as it is. Counts the rewritten series (``lies``)."""

    def __init__(self, rewrite: Callable[[str], str]) -> None:
        self.rewrite = rewrite
        self.lies = 0

    def __call__(self, request: RecordedRequest, forward: Forward) -> Response:
        answer = forward()
        if request.path.split("?")[0] != "/api/v1/query" or answer.status != 200:
            return answer
        body = json.loads(answer.body)
        data = body.get("data", {})
        result = data.get("result")
        if data.get("resultType") != "vector" or not isinstance(result, list):  # a scalar: the store's time()
            return answer
        for series in result:
            if "/increase/" in series.get("metric", {}).get("otel_bridge_q", ""):
                series["value"][1] = self.rewrite(series["value"][1])
                self.lies += 1
        return Response(body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})


@contextmanager
def lying_prometheus(
    tmp_path: Path, page: ScrapedPage, name: str, store: RewrittenIncreases, metrics: list[dict[str, Any]]
) -> Iterator[dict[str, Any]]:
    """A real Prometheus 3.16 scraping ``page`` behind a reverse proxy running ``store``; yields the config of a
    bridge reading ``metrics`` through the proxy with Prometheus' samples (no recording rules, no retries)."""
    with (
        prometheus_scraping(tmp_path / "prometheus", page, name, version="3.16") as prometheus,
        forwarding_proxy(prometheus.url, store) as proxy,
    ):
        yield base_config(
            tmp_path,
            "lying-store",
            prometheus={
                "url": proxy.url,
                "scrape_interval_s": 0.25,
                "boundary": "samples",
                "recording_rules": "off",
                "retries": 0,
            },
            metrics=metrics,
        )
