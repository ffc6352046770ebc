"""A real Prometheus server for integration tests: Debian's 2.42 or 3.16 built from its Go module (``make peers``).

Started on a free loopback port with a generated config and a short scrape interval, its data in a temporary
directory; stopped by PID (terminate, then kill) even when the test fails. ``PrometheusServer(..., version="3.16")``
runs the built Prometheus 3 with the same API; :class:`ServerProcess` is the process handling both share with
:class:`tests.helpers.victoriametrics.VictoriaMetricsServer`.

Prometheus 3 differences the helper takes care of: a scrape fails on a missing or unknown Content-Type unless the job
sets ``fallback_scrape_protocol`` (the simulated servers of ``otel_bridge.tools.simulation`` answer ``text/plain``
with a version, or OpenMetrics where they negotiate, which both versions parse; ``fallback_scrape_protocol`` passes one
through for other targets); the OTLP receiver (``otlp_receiver=True``: ``--web.enable-otlp-receiver``, 3.x only);
``--enable-feature`` flags (``features``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import requests
import yaml

from tests.helpers import reaper
from tests.helpers.http_servers import free_port
from tests.helpers.peers import PROMETHEUS3, peer_binary

#: The Prometheus versions a test can ask for: Debian's package and the one built from the Go module.
PROMETHEUS_VERSIONS = ("2.42", "3.16")
#: How often Prometheus 3 applies target changes here (``--scrape.discovery-reload-interval``, 5 s by default): its
#: first scrapes then start within a scrape interval of its start instead of after 5 s. Prometheus 2.42 raises any
#: value below 5 s to 5 s (scrape/manager.go, ``reloader``), so it keeps its 5 s.
DISCOVERY_RELOAD_S = 0.1


def either_name(name: str, matchers: str = "") -> str:
    """A selector of ``name`` as the suite's replica pairs store it: ``vllm:x`` from vLLM's text route, and ``vllm_x``
    from a negotiating replica a Prometheus 2.x scrapes (``tests.conftest.replica_routes``), so a test's own truth
    query sees every replica on every version; ``matchers`` (``model_name="tiny"``) are added."""
    escaped = name.replace(":", "_")
    names = name if escaped == name else f"{name}|{escaped}"
    return f'{{__name__=~"{names}"{", " + matchers if matchers else ""}}}'


def prometheus_binary(version: str = "2.42", tool: str = "prometheus") -> str:
    """Path of ``tool`` (``prometheus`` or ``promtool``) of Prometheus ``version``; fails with the fix when absent.

    2.42: ``$PROMETHEUS_BIN`` (its sibling for promtool) or the one on PATH, Debian's package; 3.16: the peer built by
    ``make peer-prometheus3``.
    """
    if version == "3.16":
        return str(peer_binary(PROMETHEUS3, tool))
    if version != "2.42":
        raise ValueError(f"unknown Prometheus version {version!r}: one of {PROMETHEUS_VERSIONS}")
    explicit = os.environ.get("PROMETHEUS_BIN")
    if explicit and tool != "prometheus":
        explicit = str(Path(explicit).with_name(tool))
    binary = explicit or shutil.which(tool)
    if not binary:
        raise RuntimeError(
            f"the {tool} binary is missing: run `make test` (installs the Debian package `prometheus`) "
            "or set PROMETHEUS_BIN"
        )
    return binary


class ServerProcess:
    """A server process on a free loopback port, its log in ``workdir``: :meth:`start` writes its files
    (:meth:`prepare`), runs :meth:`command` with :meth:`environment` and waits until ``ready_path`` answers 200;
    :meth:`stop` ends it by PID (SIGTERM, then SIGKILL after 10 s), also on leaving a ``with`` block. Queries go to
    its Prometheus HTTP API (``/api/v1/query``)."""

    name = "server"

    def __init__(self, workdir: Path, port: int | None, ready_path: str) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ready_path = ready_path
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / f"{self.name}.log"
        self.scrape_interval_s = 1.0

    def command(self) -> list[str]:
        """The command line :meth:`start` runs."""
        raise NotImplementedError

    def prepare(self) -> None:
        """Write what the command reads (config files) into :attr:`workdir`, which exists."""

    def environment(self) -> Mapping[str, str] | None:
        """The process' whole environment, or ``None`` for this process' own."""
        return None

    def start(self, timeout_s: float = 30.0) -> Self:
        """Start the server and wait until it is ready (stopped again if it is not)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.prepare()
        env = self.environment()
        log = self.log_path.open("ab")
        try:
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=None if env is None else dict(env),
            )
        finally:
            log.close()
        reaper.register(self.process.pid)  # its own session: its group's ID is its PID
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}: {self.log_tail()}")
            try:
                if requests.get(f"{self.url}{self.ready_path}", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} did not become ready within {timeout_s}s: {self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        """The end of the server's log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def rollout_targets(self) -> Sequence[str]:
        """The targets of the job ``rollout`` the server was configured with (none by default)."""
        return ()

    def wait_for_samples(self, expr: str, count: int = 2, timeout_s: float = 30.0) -> None:
        """Wait until every target is up and ``expr`` has at least ``count`` samples per series in the last minute.

        Every target: each of :attr:`targets` has been scraped (``up`` of a target not scraped yet does not exist, so
        ``min(up)`` alone says nothing of it), and none of the others is down."""
        deadline = time.monotonic() + timeout_s
        targets = self.rollout_targets()
        scraped = f'count(up{{job="rollout"}} == 1) >= {len(targets)}'
        while time.monotonic() < deadline:
            data = self.query(f"min(count_over_time({expr}[1m]))")
            up = self.query("min(up)")
            every = not targets or bool(self.query(scraped))
            if data and up and every and float(data[0]["value"][1]) >= count and float(up[0]["value"][1]) == 1.0:
                return
            time.sleep(min(0.2, self.scrape_interval_s / 4))
        raise RuntimeError(f"no samples of {expr} after {timeout_s}s: {self.log_tail()}")

    def wait_for_scrapes_after(self, t: float, timeout_s: float = 30.0) -> None:
        """Wait until every target it scrapes has a sample from a scrape that began after ``t`` (``time.time()``), by
        Prometheus' own timestamps (``timestamp(up)``): what each target served after ``t`` is in Prometheus. The wait
        on Prometheus' next scrape that a fixed sleep of more than a scrape interval stands in for."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            stamps = [float(r["value"][1]) for r in self.query("timestamp(up)")]
            if stamps and min(stamps) > t:
                return
            time.sleep(0.05)
        raise RuntimeError(f"no scrape of every target after {t:.3f} within {timeout_s}s: {self.log_tail()}")

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's result list (raises on an error answer)."""
        params: dict[str, str] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        response = requests.get(f"{self.url}/api/v1/query", params=params, timeout=10)
        body = response.json()
        if body.get("status") != "success":
            raise RuntimeError(f"query {expr!r} failed: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def stop(self) -> None:
        """Terminate the server by PID (kill after 10 s)."""
        if self.process is None:
            return
        try:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout=10)
        finally:
            reaper.unregister(self.process.pid)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class PrometheusServer(ServerProcess):
    """``prometheus`` scraping ``targets`` (``host:port``) every ``scrape_interval_s`` seconds, on 127.0.0.1.

    ``version`` is ``"2.42"`` (Debian's, the default) or ``"3.16"`` (built from the Go module). ``rules`` is a rule
    file's content (``groups: [...]``), loaded from ``rules.yml`` beside the config. ``enable_lifecycle`` starts it
    with ``--web.enable-lifecycle``, so ``POST /-/reload`` re-reads :attr:`config_path` (what verl's
    ``update_prometheus_config`` does after rewriting that file). ``remote_write`` starts it with
    ``--web.enable-remote-write-receiver`` (``tests/helpers/remote_write.py`` pushes to it). ``otlp_receiver`` (3.x)
    starts it with ``--web.enable-otlp-receiver`` (``/api/v1/otlp/v1/metrics``) and ``otlp`` is the config's ``otlp:``
    section (3.x: ``{"translation_strategy": "NoTranslation"}``, ...); ``features`` are
    ``--enable-feature`` names; ``fallback_scrape_protocol`` is set on the generated job (3.x), and so are
    ``scrape_options``, more keys of its scrape config as Prometheus names them
    (``{"convert_classic_histograms_to_nhcb": True}``: 3.x stores each classic histogram as one native series with
    custom buckets). ``remote_read`` is the config's ``remote_read:`` list (a test's remote-read endpoint).
    ``discovery_reload_s``
    is how often a Prometheus 3 applies target changes (:data:`DISCOVERY_RELOAD_S`; ``None``: its default, 5 s, for a
    test of what a client sees before Prometheus took up its targets).
    """

    name = "prometheus"

    def __init__(
        self,
        workdir: Path,
        targets: Sequence[str] = (),
        *,
        scrape_interval_s: float = 1.0,
        extra_scrape_configs: Sequence[dict[str, Any]] = (),
        port: int | None = None,
        config_override: dict[str, Any] | None = None,
        rules: dict[str, Any] | None = None,
        enable_lifecycle: bool = False,
        remote_write: bool = False,
        version: str = "2.42",
        otlp_receiver: bool = False,
        features: Sequence[str] = (),
        fallback_scrape_protocol: str | None = None,
        otlp: Mapping[str, Any] | None = None,
        discovery_reload_s: float | None = DISCOVERY_RELOAD_S,
        scrape_options: Mapping[str, Any] | None = None,
        remote_read: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        super().__init__(workdir, port, "/-/ready")
        if version not in PROMETHEUS_VERSIONS:
            raise ValueError(f"unknown Prometheus version {version!r}: one of {PROMETHEUS_VERSIONS}")
        if version == "2.42" and (otlp_receiver or fallback_scrape_protocol or otlp):
            raise ValueError("the OTLP receiver and fallback_scrape_protocol need Prometheus 3 (version='3.16')")
        self.version = version
        self.config_path = workdir / "prometheus.yml"
        self.enable_lifecycle = enable_lifecycle
        self.remote_write = remote_write
        self.otlp_receiver = otlp_receiver
        self.otlp = dict(otlp) if otlp is not None else None
        self.features = list(features)
        self.fallback_scrape_protocol = fallback_scrape_protocol
        self.scrape_options = dict(scrape_options or {})
        self.remote_read = [dict(endpoint) for endpoint in remote_read]
        self.targets = list(targets)
        self.scrape_interval_s = scrape_interval_s
        self.extra_scrape_configs = list(extra_scrape_configs)
        self.config_override = config_override
        self.rules = rules
        self.discovery_reload_s = discovery_reload_s

    def rollout_targets(self) -> Sequence[str]:
        return self.targets if self.config_override is None else ()

    def config(self) -> dict[str, Any]:
        """The generated prometheus.yml, or ``config_override`` as given (then targets and intervals are unused)."""
        if self.config_override is not None:
            return self.config_override
        interval = f"{int(self.scrape_interval_s * 1000)}ms"
        scrape_configs: list[dict[str, Any]] = []
        if self.targets:
            job: dict[str, Any] = {
                "job_name": "rollout",
                "static_configs": [{"targets": self.targets}],
                "scrape_timeout": interval,
            }
            if self.fallback_scrape_protocol:
                job["fallback_scrape_protocol"] = self.fallback_scrape_protocol
            job.update(self.scrape_options)
            scrape_configs.append(job)
        scrape_configs.extend(self.extra_scrape_configs)
        config: dict[str, Any] = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": scrape_configs,
        }
        if self.rules is not None:
            config["rule_files"] = ["rules.yml"]
        if self.otlp is not None:
            config["otlp"] = self.otlp
        if self.remote_read:
            config["remote_read"] = self.remote_read
        return config

    def command(self) -> list[str]:
        """The command line :meth:`start` runs."""
        return [
            prometheus_binary(self.version),
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
            *(["--web.enable-lifecycle"] if self.enable_lifecycle else []),
            *(["--web.enable-remote-write-receiver"] if self.remote_write else []),
            *(["--web.enable-otlp-receiver"] if self.otlp_receiver else []),
            *([f"--enable-feature={','.join(self.features)}"] if self.features else []),
            *self._discovery_flags(),
        ]

    def _discovery_flags(self) -> list[str]:
        if self.version == "2.42" or self.discovery_reload_s is None:
            return []
        return [f"--scrape.discovery-reload-interval={int(self.discovery_reload_s * 1000)}ms"]

    def prepare(self) -> None:
        self.config_path.write_text(yaml.safe_dump(self.config()), encoding="utf-8")
        if self.rules is not None:
            (self.workdir / "rules.yml").write_text(yaml.safe_dump(self.rules, sort_keys=False), encoding="utf-8")
