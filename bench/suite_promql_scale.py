"""PromQL scaling: one step's reading through a real Prometheus for 1 to 1,024 vLLM replicas (issue 12, point 5).

Data: no live endpoints. :mod:`bench.backfill` generates the history of N replicas of the real vLLM 0.32 capture
(the ``vllm`` preset's families: 108 series per replica, plus ``up``), sampled every 15 s, one replica restarting
(counters back to ~0, ``up`` 0 for two scrapes) inside window 2, and backfills it into TSDB blocks with ``promtool``
(cached per N under the suite's directory). A real Prometheus (``tests.helpers.prometheus_server.PrometheusServer``,
no scrape configs) is started on those blocks, once per N, and stopped by PID afterwards.

Every design runs against each Prometheus of :data:`VERSIONS` (Debian's 2.42 and 3.16 built from its Go module, one
after the other on the same blocks; the baseline on 2.42 only), and the table has both. Per N, each design reads the
same contiguous 60 s windows in the past (``StepWindow(k, start, end)``; every query is
evaluated at ``time=end``): window -1 as warm-up (not measured: page cache, first connection), then 5 measured windows
(3 with ``--quick``). Per step: wall time and Python CPU time (``time.process_time``, all threads of this process)
of the reading, and, counted by a small HTTP proxy in *another process* between the client and Prometheus: HTTP
requests, bytes received (the body on the wire — gzip when the client asks for it, as requests does — and decoded),
series and samples returned (the proxy decodes the answers after the step). Medians over the steps are reported.
Every value read is compared with the generator's exact truth for that window (``exact`` = every configured
statistic within 1e-9 relative; the largest relative error is reported).

Designs, measured in the same run against the same Prometheus:

* **baseline** (:mod:`bench.baselines.raw_promql`): the raw-sample design as of 3a63837, one instant query for the
  gauges and one range selector returning every counter/histogram sample of every replica. With the default limits it
  fails at 1,024 replicas (over ``prometheus.max_series`` 100,000): the failure is recorded and the design is run
  again with raised limits (``max_series`` 10 M, ``max_response_bytes`` 2 GB, ``timeout_s`` 120 s).
* **otel-bridge (boundary sums)**: ``otel_bridge.producers.promql.PromQLProducer(client, resolve_metrics([preset:
  vllm]), scrape_interval_s=15, recording_rules="off")``, ``start()`` then ``produce(window)``, whatever that module
  currently is, told that the store has no exact increase of its own: Prometheus sums every raw series at both
  boundaries and the targets that reset are re-read; a design that fails with the default limits is likewise re-run
  with raised limits.
* **otel-bridge (exact increase)**: the same with the plan the producer picks for the store it finds: on a store
  with an exact increase (Prometheus 3's ``increase(x[w] anchored)``) one summed increase per series name, nothing
  re-read; on Prometheus 2 the same as boundary sums.
* **otel-bridge (rules)**: the same with ``recording_rules="required"``: Prometheus runs otel-bridge's recording
  rules for the preset (``otel-bridge prometheus-rules``, every 15 s); their history over the data set is backfilled
  with ``promtool tsdb create-blocks-from rules`` (:func:`rule_history`, cached) and the group is loaded, so the
  producer finds it at start-up. What the rules cost Prometheus instead is reported per N: one evaluation of the
  whole group (``datasets[N].rules.evaluation_s``, every 15 s in a live Prometheus).

Targets (at the largest N of the run; 1,024 in the full run): with the default limits, read without error, median
wall <= 1 s, <= 2 requests in every step, and bytes that do not grow with replicas (decoded bytes at the largest N
<= 1.5 x those at 1 replica).

``python -m bench.suite_promql_scale [--quick] [--workdir DIR] [--replicas 1 64 ...]`` runs it alone (``--workdir``
keeps the generated blocks between runs); ``--table`` prints the Markdown table of the last results.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import hashlib
import http.client
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from statistics import median
from typing import Any
from urllib.parse import parse_qs, urlsplit

import requests

from bench.backfill import RESTART_WINDOW, Dataset, default_anchor, generate, truth_between, truth_key
from bench.common import REPO, RESULTS, pyplot, save_figure, write_result

NAME = "promql-scale"
REPLICAS = (1, 16, 64, 256, 1024)
QUICK_REPLICAS = (1, 64, 256)
STEPS = 5
QUICK_STEPS = 3
SCRAPE_INTERVAL_S = 15.0
RAISED_LIMITS = {"max_series": 10_000_000, "max_response_bytes": 2_000_000_000, "timeout_s": 120.0}
"""Where a design fails with the default limits it runs again with these: answers of any size, and queries Prometheus
takes up to two minutes to evaluate (``prometheus.timeout_s``: 10 s by default)."""
EXACT_REL = 1e-9
TARGET_WALL_S = 1.0
TARGET_REQUESTS = 2
TARGET_BYTES_GROWTH = 1.5
_log = logging.getLogger(__name__)

# --- the counting proxy (runs in its own process: its work is not in the measured process' CPU time) --------------

_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "date", "server", "proxy-connection"}
)
_STATS_PATH = "/__bench/stats"


def _decode(body: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "deflate":
        try:
            return zlib.decompress(body)
        except zlib.error:
            return zlib.decompress(body, -zlib.MAX_WBITS)
    return body


def _count(record: dict[str, Any]) -> dict[str, Any]:
    """Decode one recorded answer: decoded bytes, result type, series and samples returned."""
    body = _decode(record.pop("body"), record["encoding"])
    record["decoded_bytes"] = len(body)
    series = samples = 0
    try:
        data = json.loads(body).get("data")
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("result"), list):
        record["result_type"] = data.get("resultType")
        if data.get("resultType") not in ("vector", "matrix"):  # a scalar or string: [time, value], one sample
            record["series"], record["samples"] = 0, 1
            return record
        for item in data["result"]:
            series += 1
            if "values" in item or "histograms" in item:
                samples += len(item.get("values", ())) + len(item.get("histograms", ()))
            else:
                samples += 1
    record["series"], record["samples"] = series, samples
    return record


def serve_proxy(upstream: str) -> None:
    """Forward every request to ``upstream`` unchanged (bodies byte for byte, compression included) and record it.

    ``GET /__bench/stats`` returns and clears what was recorded since the last call. Prints ``{"port": N}`` on stdout
    and serves until stdin closes.
    """
    target = urlsplit(upstream)
    host, port = target.hostname or "127.0.0.1", target.port or 80
    local = threading.local()
    lock = threading.Lock()
    records: list[dict[str, Any]] = []

    def connection(fresh: bool = False) -> http.client.HTTPConnection:
        conn = getattr(local, "conn", None)
        if conn is None or fresh:
            if conn is not None:
                conn.close()
            conn = local.conn = http.client.HTTPConnection(host, port, timeout=300)
        return conn

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            if self.path == _STATS_PATH:
                with lock:
                    taken = records[:]
                    records.clear()
                body = json.dumps([_count(r) for r in taken]).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self._forward()

        def do_POST(self) -> None:
            self._forward()

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            for attempt in (0, 1):
                conn = connection(fresh=attempt == 1)
                try:
                    sent = time.perf_counter()
                    conn.request(self.command, self.path, body=body, headers=headers)
                    answer = conn.getresponse()
                    data = answer.read()
                    upstream_s = time.perf_counter() - sent
                    break
                except (http.client.HTTPException, OSError):
                    if attempt == 1:
                        raise
            encoding = (answer.getheader("Content-Encoding") or "identity").lower()
            form = parse_qs(body.decode("utf-8", "replace")) if body else parse_qs(urlsplit(self.path).query)
            query = form.get("query", [""])[0]
            with lock:
                records.append({"method": self.command, "path": self.path.split("?", 1)[0], "status": answer.status,
                                "upstream_s": upstream_s, "query_chars": len(query), "query_head": query[:300],
                                "wire_bytes": len(data), "encoding": encoding, "body": data})  # fmt: skip
            self.send_response(answer.status)
            for key, value in answer.getheaders():
                if key.lower() not in _HOP:
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdout.write(json.dumps({"port": server.server_address[1]}) + "\n")
    sys.stdout.flush()
    sys.stdin.read()
    os._exit(0)


class CountingProxy:
    """The proxy of :func:`serve_proxy` as a child process (stopped by PID); ``take()`` returns its records."""

    def __init__(self, upstream: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.suite_promql_scale", "--proxy", upstream],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the counting proxy exited with {self.process.wait()} before listening")
        self.url = f"http://127.0.0.1:{json.loads(line)['port']}"
        self._session = requests.Session()
        self._session.trust_env = False

    def take(self) -> list[dict[str, Any]]:
        """The requests forwarded since the last call (decoded and counted by the proxy)."""
        answer = self._session.get(self.url + _STATS_PATH, timeout=300)
        answer.raise_for_status()
        records: list[dict[str, Any]] = answer.json()
        return records

    def close(self) -> None:
        """Stop the proxy (it exits when its stdin closes; killed by PID after 5 s)."""
        self._session.close()
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)


# --- Prometheus on the backfilled blocks -------------------------------------------------------------------------


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Backend:
    """A running Prometheus on a data set's blocks, behind the counting proxy."""

    url: str
    pid: int
    startup_s: float
    proxy: CountingProxy

    def server_cpu_s(self) -> float:
        """Prometheus' CPU seconds so far."""
        return process_cpu_s(self.pid)


@contextmanager
def prometheus_on(
    dataset: Dataset, workdir: Path, rules: RuleHistory | None = None, version: str = "2.42"
) -> Iterator[Backend]:
    """A real Prometheus ``version`` whose data directory holds ``dataset``'s blocks (hard links), and the counting
    proxy; with ``rules``, also the rule group's backfilled history, and the group loaded (``/api/v1/rules`` lists
    it)."""
    from tests.helpers.prometheus_server import PrometheusServer

    if workdir.exists():
        shutil.rmtree(workdir)
    data = workdir / "data"
    data.mkdir(parents=True)
    sources = [dataset.blocks] + ([rules.blocks] if rules is not None else [])
    for block in (b for source in sources for b in source.iterdir() if b.is_dir()):
        try:
            shutil.copytree(block, data / block.name, copy_function=os.link)
        except OSError:
            shutil.copytree(block, data / block.name, dirs_exist_ok=True)
    interval = f"{int(SCRAPE_INTERVAL_S)}s"
    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [],
    }
    if rules is not None:
        config["rule_files"] = [str(rules.file)]
    server = PrometheusServer(workdir, config_override=config, version=version)
    t0 = time.perf_counter()
    try:
        server.start(timeout_s=120.0)
        startup_s = time.perf_counter() - t0
        assert server.process is not None
        proxy = CountingProxy(server.url)
        try:
            yield Backend(server.url, server.process.pid, startup_s, proxy)
        finally:
            proxy.close()
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@dataclass
class RuleHistory:
    """otel-bridge's rule file for the ``vllm`` preset and its evaluations over a data set, as TSDB blocks."""

    file: Path
    blocks: Path
    info: dict[str, Any]


def rule_history(dataset: Dataset, workdir: Path, promtool: str = "promtool") -> RuleHistory:
    """The rule group evaluated every 15 s over ``dataset``'s whole history by ``promtool tsdb create-blocks-from
    rules`` (against a Prometheus on the raw blocks), cached beside the data set's blocks.

    Backfilled evaluations see every sample (none is still being stored), as a live evaluation does once its
    samples' scrapes are done. Also measured: one evaluation of the whole group at a window's end (the work
    Prometheus does every interval instead of at every step), as the rule's instant query.
    """
    from otel_bridge.producers.promql import rule_for, rules_document
    from otel_bridge.tools import write_rule_file

    home = dataset.blocks.parent / "rules"
    manifest = home / "manifest.json"
    if manifest.exists():
        return RuleHistory(home / "otel-bridge.rules.yml", home / "blocks", json.loads(manifest.read_text()))
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    file = home / "otel-bridge.rules.yml"
    write_rule_file(file, rules_document(_queries(), SCRAPE_INTERVAL_S))
    layout = dataset.layout
    start = math.floor(layout.first_sample)
    end = math.ceil(layout.window(layout.windows)[1] + SCRAPE_INTERVAL_S)
    with prometheus_on(dataset, workdir / "prometheus-rules-backfill") as backend:
        session = requests.Session()
        at = f"{layout.window(0)[1]:.3f}"
        rule = rule_for(_queries())
        assert rule is not None, "the bench's metrics have counting queries"
        t0 = time.perf_counter()
        answer = session.post(f"{backend.url}/api/v1/query", data={"query": rule.expr, "time": at}, timeout=120)
        answer.raise_for_status()
        evaluation_s = time.perf_counter() - t0
        cpu0, t0 = backend.server_cpu_s(), time.perf_counter()
        done = subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "rules", "--start", str(start), "--end", str(end), "--url",
             backend.url, "--eval-interval", f"{int(SCRAPE_INTERVAL_S)}s", "--output-dir", str(home / "blocks"),
             str(file)],
            capture_output=True, text=True, check=False, timeout=3600,
        )  # fmt: skip
        backfill_s, backfill_cpu_s = time.perf_counter() - t0, backend.server_cpu_s() - cpu0
    if done.returncode != 0:
        raise RuntimeError(f"promtool failed ({done.returncode}): {(done.stderr or done.stdout)[-2000:]}")
    info = {"evaluation_s": evaluation_s, "evaluations": (end - start) // int(SCRAPE_INTERVAL_S),
            "backfill_s": backfill_s, "backfill_prometheus_cpu_s": backfill_cpu_s}  # fmt: skip
    manifest.write_text(json.dumps(info))
    return RuleHistory(file, home / "blocks", {**info, "cached": False})


def rules_truth(dataset: Dataset, backend: Backend, steps: int) -> dict[str, Any]:
    """The truth of windows -1..steps-1 as the recording rules bound them: counters and histograms counted between
    the rule evaluations at or before each boundary (asked of Prometheus directly, outside the measured steps)."""
    from otel_bridge.producers.promql import PRESENT

    def evaluation(t: float) -> float:
        answer = requests.post(f"{backend.url}/api/v1/query", timeout=60,
                               data={"query": f"max(timestamp({PRESENT} @ {t:.3f}))", "time": f"{t:.3f}"})  # fmt: skip
        answer.raise_for_status()
        return float(answer.json()["data"]["result"][0]["value"][1])

    bounds = {k: dataset.layout.window(k) for k in range(-1, steps)}
    return truth_between(dataset, {k: (evaluation(a), evaluation(b)) for k, (a, b) in bounds.items()})


# --- the designs --------------------------------------------------------------------------------------------------


@dataclass
class Design:
    """A way of reading one step: ``read(window)`` returns ``{"<key>/<stat>": value}``."""

    name: str
    limits: str
    read: Callable[[Any], dict[str, float]]
    close: Callable[[], None]


def _queries() -> list[Any]:
    from otel_bridge.config import MetricConfig
    from otel_bridge.producers import resolve_metrics

    return resolve_metrics([MetricConfig(preset="vllm")])


def _client(url: str, limits: str) -> Any:
    from otel_bridge.config import PrometheusConfig
    from otel_bridge.producers.promql import connect

    return connect(PrometheusConfig(url=url, **(RAISED_LIMITS if limits == "raised" else {})))


def baseline_design(url: str, limits: str) -> Design:
    """The frozen raw-sample design (:mod:`bench.baselines.raw_promql`)."""
    from bench.baselines.raw_promql import RawPromQLReader

    client = _client(url, limits)
    reader = RawPromQLReader(client, _queries(), scrape_interval_s=SCRAPE_INTERVAL_S)

    def read(window: Any) -> dict[str, float]:
        out = {}
        for key, points in reader.produce(window).items():
            for p in points:
                out[truth_key(key, p.stat, dict(p.group))] = p.value
        return out

    return Design("baseline", limits, read, client.close)


def bridge_design(url: str, limits: str, *, rules: bool = False, boundary_sums: bool = False) -> Design:
    """``otel_bridge.producers.promql.PromQLProducer`` as it is in the working tree, reading raw series
    (``recording_rules="off"``) or through otel-bridge's recording rules (``"required"``), with the plan it picks for
    the store it finds (the store's exact increase where it has one), or with ``boundary_sums`` the plan for a store
    without one (the samples at each boundary summed, and the targets that reset re-read)."""
    from dataclasses import replace

    from otel_bridge.producers import metrics_of
    from otel_bridge.producers.promql import PromQLProducer, detect_store
    from otel_bridge.schema import STAT_ATTRIBUTE

    client = _client(url, limits)
    store = replace(detect_store(client), increase=None) if boundary_sums else None
    producer = PromQLProducer(
        client,
        _queries(),
        scrape_interval_s=SCRAPE_INTERVAL_S,
        recording_rules="required" if rules else "off",
        store=store,
    )
    producer.start()
    assert producer.store is not None

    def read(window: Any) -> dict[str, float]:
        out = {}
        for metric in metrics_of(producer.produce(window=window)):
            for point in metric.data.data_points:
                attributes = dict(point.attributes or {})
                stat = attributes.pop(STAT_ATTRIBUTE, None)
                out[truth_key(metric.name, stat, attributes)] = float(getattr(point, "value", math.nan))
        return out

    plan = "rules" if rules else "boundary sums" if producer.store.increase is None else "exact increase"
    return Design(f"otel-bridge ({plan})", limits, read, producer.close)


DESIGNS: dict[str, Callable[[str, str], Design]] = {
    "baseline": baseline_design,
    "otel-bridge (boundary sums)": functools.partial(bridge_design, boundary_sums=True),
    "otel-bridge (exact increase)": bridge_design,
    "otel-bridge (rules)": functools.partial(bridge_design, rules=True),
}
VERSIONS = ("2.42", "3.16")
"""The Prometheus versions every design is measured against, in one run (the baseline on the first only)."""


# --- measuring ----------------------------------------------------------------------------------------------------


def compare(values: dict[str, float], truth: dict[str, float]) -> dict[str, Any]:
    """Every truth key against the value read: exact within ``EXACT_REL``? largest relative error, missing keys."""
    worst, worst_key, missing, wrong = 0.0, None, [], []
    for key, expected in truth.items():
        got = values.get(key)
        if got is None:
            missing.append(key)
            continue
        if math.isnan(expected) or math.isnan(got):
            error = 0.0 if math.isnan(expected) and math.isnan(got) else math.inf
        else:
            error = abs(got - expected) / abs(expected) if expected != 0 else abs(got)
        if error > EXACT_REL:
            wrong.append(key)
        if error > worst:
            worst, worst_key = error, key
    return {"exact": not missing and not wrong, "max_rel_error": worst, "worst_key": worst_key, "missing": missing,
            "inexact": wrong, "extra": sorted(set(values) - set(truth))}  # fmt: skip


def _window(dataset: Dataset, k: int) -> Any:
    from otel_bridge.window import StepWindow

    start, end = dataset.layout.window(k)
    return StepWindow(step=k, start=start, end=end)


def _one_step(
    design: Design, backend: Backend, dataset: Dataset, k: int, truth: dict[str, Any] | None = None
) -> dict[str, Any]:
    backend.proxy.take()  # anything before this step (start-up checks, the previous step) is not this step's
    window = _window(dataset, k)
    error = None
    values: dict[str, float] = {}
    server0 = backend.server_cpu_s()
    w0, c0 = time.perf_counter(), time.process_time()
    try:
        values = design.read(window)
    except Exception as exc:  # noqa: BLE001 (a design's failure is a result to record)
        error = f"{type(exc).__name__}: {exc}"[:400]
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    server_cpu = backend.server_cpu_s() - server0
    records = backend.proxy.take()
    step = {
        "window": k,
        "start": window.start,
        "end": window.end,
        "wall_s": wall,
        "cpu_s": cpu,
        "prometheus_cpu_s": server_cpu,
        "prometheus_s": sum(r["upstream_s"] for r in records),
        "requests": len(records),
        "wire_bytes": sum(r["wire_bytes"] for r in records),
        "decoded_bytes": sum(r["decoded_bytes"] for r in records),
        "series": sum(r["series"] for r in records),
        "samples": sum(r["samples"] for r in records),
        "per_request": records,
        "error": error,
    }
    if error is None:
        step["truth"] = compare(values, (truth or dataset.truth)[str(k)])
    return step


def measure(
    design: Design, backend: Backend, dataset: Dataset, steps: int, truth: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Warm-up on window -1, then windows 0..steps-1; stops at the first failed measured step. ``truth`` replaces
    the data set's own (the windows' truth as the design bounds them)."""
    warmup = _one_step(design, backend, dataset, -1, truth)
    measured = []
    for k in range(steps):
        step = _one_step(design, backend, dataset, k, truth)
        measured.append(step)
        if step["error"]:
            outcome = f", error {step['error']}"
        elif step["truth"]["exact"]:
            outcome = ", exact"
        else:
            outcome = f", max rel error {step['truth']['max_rel_error']:.3g}"
        _log.info(
            "promql-scale: %d replicas, %s (%s limits), window %d: %.3f s wall (%.3f s in Prometheus), %.3f s CPU, "
            "%d requests, %d bytes (%d decoded), %d series%s",
            dataset.replicas, design.name, design.limits, k, step["wall_s"], step["prometheus_s"], step["cpu_s"],
            step["requests"], step["wire_bytes"], step["decoded_bytes"], step["series"], outcome,
        )  # fmt: skip
        if step["error"]:
            break
    return {"warmup": warmup, "steps": measured, "summary": summarize(measured)}


def summarize(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the steps that succeeded; errors, exactness (the restart window on its own)."""
    ok = [s for s in steps if s["error"] is None]
    out: dict[str, Any] = {"steps": len(steps), "errors": len(steps) - len(ok),
                           "first_error": next((s["error"] for s in steps if s["error"]), None)}  # fmt: skip
    for field in (
        "wall_s",
        "cpu_s",
        "prometheus_s",
        "prometheus_cpu_s",
        "requests",
        "wire_bytes",
        "decoded_bytes",
        "series",
        "samples",
    ):
        out[field] = median(s[field] for s in ok) if ok else math.nan
    out["max_requests"] = max((s["requests"] for s in steps), default=0)
    out["failed_wall_s"] = next((s["wall_s"] for s in steps if s["error"]), None)
    out["exact_steps"] = sum(1 for s in ok if s["truth"]["exact"])
    out["max_rel_error"] = max((s["truth"]["max_rel_error"] for s in ok), default=math.nan)
    restart = [s for s in ok if s["window"] == RESTART_WINDOW]
    out["restart_window_exact"] = restart[0]["truth"]["exact"] if restart else None
    return out


def targets(rows: list[dict[str, Any]], design: str) -> dict[str, Any]:
    """The issue's targets for ``design`` with the default limits, at the largest N measured."""
    mine = sorted((r for r in rows if r["design"] == design and r["limits"] == "default"), key=lambda r: r["replicas"])
    if not mine:
        return {}
    top, first = mine[-1], mine[0]
    comparable = first is not top and first["errors"] == 0 and first["decoded_bytes"] > 0
    growth = top["decoded_bytes"] / first["decoded_bytes"] if comparable else math.nan
    no_error = top["errors"] == 0
    return {
        "replicas": top["replicas"],
        "read_without_error": no_error,
        "wall_s": top["wall_s"],
        "wall_le_1s": no_error and top["wall_s"] <= TARGET_WALL_S,
        "max_requests": top["max_requests"],
        "requests_le_2": top["max_requests"] <= TARGET_REQUESTS,
        "bytes_growth": {"from_replicas": first["replicas"], "ratio": growth},
        "bytes_flat": (no_error and growth <= TARGET_BYTES_GROWTH) if comparable else None,
        "exact": no_error and top["exact_steps"] == top["steps"],
    }


def source_state() -> dict[str, Any]:
    """Which otel-bridge was measured: the commit, and the files under otel_bridge/ that differ from it."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=REPO, check=False)
        return done.stdout.strip()

    promql = REPO / "otel_bridge" / "producers" / "promql.py"
    return {
        "commit": git("rev-parse", "HEAD"),
        "uncommitted": git("status", "--porcelain", "--", "otel_bridge").splitlines(),
        "promql_py_sha256": hashlib.sha256(promql.read_bytes()).hexdigest() if promql.exists() else None,
    }


def run(
    quick: bool,
    workdir: Path,
    replicas: tuple[int, ...] | None = None,
    steps: int | None = None,
    versions: tuple[str, ...] = (),
    designs: tuple[str, ...] = (),
    name: str = NAME,
) -> dict[str, Any]:
    """Run the suite (``versions`` and ``designs``: only these; default all); write ``results/<name>.json`` and
    ``.png``; return the rows for the README table."""
    versions = versions or VERSIONS
    chosen = {d: DESIGNS[d] for d in designs} if designs else DESIGNS
    counts = replicas or (QUICK_REPLICAS if quick else REPLICAS)
    steps = steps or (QUICK_STEPS if quick else STEPS)
    anchor = default_anchor()
    datasets: dict[str, Any] = {}
    runs: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for n in counts:
        t0 = time.perf_counter()
        dataset = generate(n, workdir / "data" / f"n{n}", anchor)
        datasets[str(n)] = {**dataset.info, "layout": vars(dataset.layout), "wall_s": time.perf_counter() - t0}
        _log.info("promql-scale: %d replicas: history ready in %.1f s (%s)", n, time.perf_counter() - t0,
                  "cached" if dataset.info["cached"] else "generated")  # fmt: skip
        runs[str(n)] = {}
        t0 = time.perf_counter()
        history = rule_history(dataset, workdir)
        datasets[str(n)]["rules"] = {**history.info, "wall_s": time.perf_counter() - t0}
        _log.info("promql-scale: %d replicas: rule history ready in %.1f s; one evaluation of the group %.2f s",
                  n, time.perf_counter() - t0, history.info["evaluation_s"])  # fmt: skip
        for version in versions:
            with prometheus_on(dataset, workdir / f"prometheus-{n}-{version}", history, version) as backend:
                datasets[str(n)][f"prometheus_{version}_startup_s"] = backend.startup_s
                for design_name, build in chosen.items():
                    if design_name == "baseline" and version != VERSIONS[0]:
                        continue
                    for limits in ("default", "raised"):
                        result: dict[str, Any]
                        try:
                            design = build(backend.proxy.url, limits)
                        except Exception as exc:  # noqa: BLE001 (recorded: a design that cannot start)
                            result = {"start_error": f"{type(exc).__name__}: {exc}"[:400], "steps": [],
                                      "summary": summarize([])}  # fmt: skip
                        else:
                            try:
                                truth = rules_truth(dataset, backend, steps) if "rules" in design_name else None
                                result = measure(design, backend, dataset, steps, truth)
                            finally:
                                design.close()
                        runs[str(n)][f"{design_name}/{version}/{limits}"] = result
                        rows.append({"replicas": n, "prometheus": version, "design": design_name, "plan": design.name,
                                     "limits": limits, **result["summary"],
                                     "start_error": result.get("start_error")})  # fmt: skip
                        if result["summary"]["errors"] == 0 and not result.get("start_error"):
                            break  # the raised limits only where the default ones fail
    goals = {
        f"{name} on {version}": targets([r for r in rows if r["prometheus"] == version], name)
        for name in chosen
        for version in versions
        if name != "baseline" or version == VERSIONS[0]
    }
    configuration = {
        "replicas": list(counts),
        "prometheus_versions": list(versions),
        "steps": steps,
        "window_s": 60.0,
        "scrape_interval_s": SCRAPE_INTERVAL_S,
        "preset": "vllm",
        "default_limits": {"max_series": 100_000, "max_response_bytes": 50_000_000},
        "raised_limits": RAISED_LIMITS,
        "anchor": anchor,
        "restart_window": RESTART_WINDOW,
        "exact_rel_tolerance": EXACT_REL,
        "otel_bridge_source": source_state(),
    }
    payload = {"configuration": configuration, "datasets": datasets, "runs": runs, "rows": rows, "targets": goals}
    write_result(name, payload)
    _plot(rows, name)
    return {"rows": rows, "targets": goals}


def _plot(rows: list[dict[str, Any]], name: str = NAME) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    styles = {
        "baseline": ("tab:grey", "s"),
        "otel-bridge (boundary sums)": ("tab:blue", "o"),
        "otel-bridge (exact increase)": ("tab:orange", "D"),
        "otel-bridge (rules)": ("tab:green", "^"),
    }
    for design, (colour, marker) in styles.items():
        for version, line in zip(VERSIONS, ("-", "--"), strict=True):
            mine = sorted((r for r in rows if r["design"] == design and r.get("prometheus", "2.42") == version),
                          key=lambda r: r["replicas"])  # fmt: skip
            good = [r for r in mine if r["errors"] == 0 and not r["start_error"]]
            label = f"{design}, Prometheus {version}" + (" (raised limits)" if any(
                r["limits"] == "raised" for r in good) else "")  # fmt: skip
            if good:
                xs = [r["replicas"] for r in good]
                left.plot(xs, [r["wall_s"] for r in good], line, marker=marker, color=colour, label=label)
                right.plot(xs, [r["decoded_bytes"] for r in good], line, marker=marker, color=colour,
                           label=f"{label}, decoded")  # fmt: skip
            for r in mine:
                if r["errors"] and r["failed_wall_s"] is not None:
                    left.plot([r["replicas"]], [r["failed_wall_s"]], "x", color="red", markersize=10,
                              label=f"{design} on {version} fails ({r['limits']} limits)")  # fmt: skip
    left.axhline(TARGET_WALL_S, color="red", linestyle=":", label="target 1 s")
    for ax, ylabel in ((left, "wall time per step (s, median)"), (right, "bytes received per step (median)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("vLLM replicas")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
    left.set_title("one step's reading, vllm preset, 60 s window")
    save_figure(fig, name)


def render(payload: dict[str, Any]) -> str:
    """The Markdown table of a results payload (``bench/results/promql-scale.json``)."""
    conf = payload["configuration"]
    out = [
        f"**PromQL scaling** (`vllm` preset, 60 s windows, 15 s scrape interval, median of {conf['steps']} steps; "
        "wall = the reading, in which Prometheus = waiting for its answers; CPU = this process / Prometheus'; "
        "bytes = response bodies received, gzip on the wire / decoded JSON)",
        "",
        "| replicas | Prometheus | design (limits): the plan it used | wall (s) | in Prometheus (s) | "
        "CPU: Python / Prometheus (s) | requests (max) | bytes wire / decoded | series | samples | exact steps | "
        "max rel. error | error |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in payload["rows"]:
        error = r.get("start_error") or r.get("first_error") or ""
        if error:
            error = error.split(":", 1)[0] + (f" after {r['failed_wall_s']:.2f} s" if r.get("failed_wall_s") else "")
        ok = r["errors"] == 0 and not r.get("start_error")
        numbers = (
            f"{r['wall_s']:.3f} | {r['prometheus_s']:.3f} | {r['cpu_s']:.3f} / {r['prometheus_cpu_s']:.2f} | "
            f"{r['max_requests']} | {_size(r['wire_bytes'])} / "
            f"{_size(r['decoded_bytes'])} | {r['series']:,.0f} | {r['samples']:,.0f} | "
            f"{r['exact_steps']}/{r['steps']} | {r['max_rel_error']:.2g}"
            if ok
            else "- | - | - | - | - | - | - | - | -"
        )
        design = f"{r['design']} ({r['limits']})" + (
            f": {r['plan']}" if r.get("plan") not in (None, r["design"]) else ""
        )
        out.append(f"| {r['replicas']} | {r.get('prometheus', '2.42')} | {design} | {numbers} | {error} |")
    out += ["", "| target (default limits, largest N) | " + " | ".join(payload["targets"]) + " |",
            "|---|" + "---|" * len(payload["targets"])]  # fmt: skip
    goals = payload["targets"]

    def cell(name: str, what: str) -> str:
        goal = goals[name]
        if what == "error":
            return "yes" if goal["read_without_error"] else "NO"
        if what in ("wall", "bytes", "exact") and not goal["read_without_error"]:
            return "NO (fails)"
        if what == "wall":
            return f"{'yes' if goal['wall_le_1s'] else 'NO'} ({goal['wall_s']:.2f} s)"
        if what == "requests":
            return f"{'yes' if goal['requests_le_2'] else 'NO'} ({goal['max_requests']})"
        if what == "bytes":
            if goal["bytes_flat"] is None:
                return "n/a (one N)"
            return f"{'yes' if goal['bytes_flat'] else 'NO'} ({goal['bytes_growth']['ratio']:.1f}x)"
        return "yes" if goal["exact"] else "NO"

    n = next(iter(goals.values()))["replicas"]
    for what, label in (
        ("error", f"reads {n} replicas without error"),
        ("wall", "wall <= 1 s"),
        ("requests", "<= 2 requests per step"),
        ("bytes", f"bytes flat (decoded, at {n} / at the smallest N <= 1.5)"),
        ("exact", "exact"),
    ):
        out.append(f"| {label} | " + " | ".join(cell(name, what) for name in goals) + " |")  # fmt: skip
    return "\n".join(out) + "\n"


def _size(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.1f} MB"
    if value >= 1e3:
        return f"{value / 1e3:.1f} kB"
    return f"{value:.0f} B"


def main() -> None:
    """Entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m bench.suite_promql_scale", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workdir", type=Path, help="keep the generated blocks here (default: a temporary directory)")
    parser.add_argument("--replicas", type=int, nargs="+")
    parser.add_argument("--steps", type=int)
    parser.add_argument("--versions", nargs="+", choices=VERSIONS, default=[], help="only these Prometheus versions")
    parser.add_argument("--designs", nargs="+", choices=list(DESIGNS), default=[], help="only these designs")
    parser.add_argument("--name", default=NAME, help="results file name (default: %(default)s)")
    parser.add_argument("--table", action="store_true", help="print the table of the last results and exit")
    parser.add_argument("--proxy", metavar="UPSTREAM", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.proxy:
        serve_proxy(args.proxy)
        return
    if args.table:
        print(render(json.loads((RESULTS / f"{args.name}.json").read_text())))
        return
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("bench").setLevel(logging.INFO)
    started = time.perf_counter()
    replicas = tuple(args.replicas) if args.replicas else None
    chosen = {"versions": tuple(args.versions), "designs": tuple(args.designs), "name": args.name}
    if args.workdir:
        run(args.quick, args.workdir, replicas, args.steps, **chosen)
    else:
        with tempfile.TemporaryDirectory(prefix="otel-bridge-promql-scale-") as tmp:
            run(args.quick, Path(tmp), replicas, args.steps, **chosen)
    print(render(json.loads((RESULTS / f"{args.name}.json").read_text())))
    print(f"suite {args.name}: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
