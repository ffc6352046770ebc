"""Scrape scaling: ``ScrapeProducer`` over 1, 8, 64 and 256 local vLLM-like endpoints.

Every endpoint serves the real vLLM capture (``tests/fixtures/vllm/metrics-after-requests.txt``) from
:mod:`bench.capture_server` (one separate process, one event loop, keep-alive). 20 of the capture's metric families
are configured (``TWENTY_METRICS``). Measured per round, in this process (all threads):

* ``collection``: ``on_boundary(t)`` until ``produce(window)`` returns: the boundary scrape round (HTTP fetch of every
  endpoint on the producer's 32-thread pool + parsing only the configured families) and the window statistics.
* ``scrape round``: ``on_boundary(t)`` until every endpoint's reading of it is stored (fetch + parse of every endpoint),
  read with a read-only probe of the producer's private targets (benchmark instrumentation only);
  ``stats`` = ``collection - scrape round``: ``produce`` turning the readings into window statistics.
* wall and CPU time (``time.process_time``), bytes parsed per second = endpoints x capture bytes / wall.

BASELINE (labelled as such): the same endpoints fetched on a 32-thread pool with one ``requests.Session`` each, and
every exposition fully parsed with ``prometheus_client.parser.text_string_to_metric_families`` (what a client that
parses everything does). Also a parse-only comparison on the capture text in memory, without HTTP.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from bench.common import CAPTURE, CpuTimer, capture_servers, pyplot, save_figure, summary, write_result
from otel_bridge.config import BridgeConfig
from otel_bridge.producers import metrics_of, resolve_metrics
from otel_bridge.producers.scrape import ScrapeProducer
from otel_bridge.prometheus import parse_exposition
from otel_bridge.window import StepWindow
from tests.helpers.metric_sets import TWENTY_METRICS

NAME = "scrape"
ENDPOINTS = (1, 8, 64, 256)
_log = logging.getLogger(__name__)


def _parse_only(repeats: int) -> dict[str, Any]:
    text = CAPTURE.read_text(encoding="utf-8")
    wanted = frozenset(m["name"] for m in TWENTY_METRICS)
    ours: list[float] = []
    full_ours: list[float] = []
    base: list[float] = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        parse_exposition(text, wanted)
        t1 = time.perf_counter()
        parse_exposition(text)
        t2 = time.perf_counter()
        for family in text_string_to_metric_families(text):
            for _sample in family.samples:
                pass
        t3 = time.perf_counter()
        ours.append(t1 - t0)
        full_ours.append(t2 - t1)
        base.append(t3 - t2)
    size = len(text.encode())
    families = len(parse_exposition(text))
    return {
        "capture": str(CAPTURE.name),
        "bytes": size,
        "families_in_capture": families,
        "families_configured": len(wanted),
        "otel_bridge_filtered_s": summary(ours),
        "otel_bridge_all_families_s": summary(full_ours),
        "baseline_prometheus_client_full_s": summary(base),
        "throughput_mb_s": {
            "otel_bridge_filtered": size / summary(ours)["p50"] / 1e6,
            "otel_bridge_all_families": size / summary(full_ours)["p50"] / 1e6,
            "baseline_prometheus_client": size / summary(base)["p50"] / 1e6,
        },
        "ratio_filtered_over_baseline": summary(base)["p50"] / summary(ours)["p50"],
        "samples_s": {"otel_bridge_filtered": ours, "otel_bridge_all_families": full_ours, "baseline": base},
    }


def _wait_for_readings(producer: ScrapeProducer, t: float) -> None:
    """Read-only probe of the producer's private state: wait until every target has a reading sent at or after ``t``."""

    def stored() -> bool:
        return all(any(r.sent >= t for r in target.readings.readings) for target in producer._targets.values())

    with producer._cond:
        producer._cond.wait_for(stored, timeout=60)


def _bridge_rounds(targets: list[str], rounds: int) -> dict[str, Any]:
    queries = resolve_metrics(BridgeConfig.load({"metrics": TWENTY_METRICS, "scrape": {"targets": targets}}).metrics)
    producer = ScrapeProducer(targets, queries, sample_interval_s=0.0)
    walls: list[float] = []
    cpus: list[float] = []
    stats_walls: list[float] = []
    keys: list[int] = []
    try:
        producer.start()
        last = time.time()
        for index in range(rounds):
            now = time.time()
            window = StepWindow(index, last, now)
            with CpuTimer() as collection:
                producer.on_boundary(now)
                _wait_for_readings(producer, now)
                round_wall = time.perf_counter() - collection._w0
                metrics = metrics_of(producer.produce(window=window))
            walls.append(collection.wall)
            cpus.append(collection.cpu)
            stats_walls.append(collection.wall - round_wall)
            keys.append(sum(len(m.data.data_points) for m in metrics))
            last = now
    finally:
        producer.close()
    return {"collection_wall_s": walls, "collection_cpu_s": cpus, "stats_wall_s": stats_walls, "points": keys}


def _baseline_rounds(targets: list[str], rounds: int) -> dict[str, Any]:
    sessions = {t: requests.Session() for t in targets}
    walls: list[float] = []
    cpus: list[float] = []

    def one(target: str) -> int:
        text = sessions[target].get(f"http://{target}/metrics", timeout=10).text
        return sum(len(f.samples) for f in text_string_to_metric_families(text))

    with ThreadPoolExecutor(max_workers=32) as pool:
        list(pool.map(one, targets))  # connect once, as the producer's start() does
        for _ in range(rounds):
            with CpuTimer() as timer:
                list(pool.map(one, targets))
            walls.append(timer.wall)
            cpus.append(timer.cpu)
    for session in sessions.values():
        session.close()
    return {"collection_wall_s": walls, "collection_cpu_s": cpus}


def run(quick: bool, workdir: Path) -> dict[str, Any]:
    """Run the suite; write ``results/scrape.json`` and ``.png``; return the rows for the README table."""
    parse = _parse_only(5 if quick else 30)
    runs: dict[str, Any] = {}
    rows = []
    with capture_servers(max(ENDPOINTS)) as servers:
        for count in ENDPOINTS:
            rounds = (2 if count >= 64 else 4) if quick else (3 if count >= 256 else 6)
            targets = servers.targets[:count]
            _log.info("scrape: %d endpoints, %d rounds", count, rounds)
            ours = _bridge_rounds(targets, rounds)
            base = _baseline_rounds(targets, rounds)
            byte_count = count * servers.body_bytes
            o_wall = summary(ours["collection_wall_s"])["p50"]
            o_stats = summary(ours["stats_wall_s"])["p50"]
            b_wall = summary(base["collection_wall_s"])["p50"]
            row = {
                "endpoints": count,
                "collection_wall_s_p50": o_wall,
                "collection_cpu_s_p50": summary(ours["collection_cpu_s"])["p50"],
                "scrape_round_wall_s_p50": o_wall - o_stats,
                "stats_wall_s_p50": o_stats,
                "bridge_mb_s": byte_count / o_wall / 1e6,
                "bridge_round_only_mb_s": byte_count / (o_wall - o_stats) / 1e6,
                "baseline_wall_s_p50": b_wall,
                "baseline_cpu_s_p50": summary(base["collection_cpu_s"])["p50"],
                "baseline_mb_s": byte_count / b_wall / 1e6,
                "ratio_collection": b_wall / o_wall,
                "ratio_round_only": b_wall / (o_wall - o_stats),
            }
            rows.append(row)
            runs[str(count)] = {"otel_bridge": ours, "baseline": base, "bytes_per_round": byte_count, "row": row}
        body_bytes = servers.body_bytes
    by_count = {r["endpoints"]: r for r in rows}
    targets_met = {
        "ratio_ge_5x_at_64_collection": by_count[64]["ratio_collection"] >= 5,
        "ratio_ge_5x_at_64_round_only": by_count[64]["ratio_round_only"] >= 5,
        "ratio_ge_5x_parse_only": parse["ratio_filtered_over_baseline"] >= 5,
        "collection_64_within_0_5s": by_count[64]["collection_wall_s_p50"] <= 0.5,
        "scrape_round_64_within_0_5s": by_count[64]["scrape_round_wall_s_p50"] <= 0.5,
    }
    write_result(NAME, {
        "configuration": {"endpoints": list(ENDPOINTS), "capture": CAPTURE.name, "capture_bytes": body_bytes,
                          "families_configured": 20, "producer_pool_threads": 32, "baseline_pool_threads": 32,
                          "server": "bench.capture_server: 1 process, asyncio, keep-alive"},
        "parse_only": parse, "runs": runs, "rows": rows, "targets": targets_met,
    })  # fmt: skip
    _plot(rows)
    return {"rows": rows, "parse_only_ratio": parse["ratio_filtered_over_baseline"],
            "parse_only_mb_s": parse["throughput_mb_s"], "targets": targets_met}  # fmt: skip


def _plot(rows: list[dict[str, Any]]) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    counts = [r["endpoints"] for r in rows]
    left.plot(counts, [r["collection_wall_s_p50"] for r in rows], "o-", label="otel-bridge collection (round + stats)")
    left.plot(counts, [r["scrape_round_wall_s_p50"] for r in rows], "o--", label="otel-bridge scrape round only")
    left.plot(counts, [r["baseline_wall_s_p50"] for r in rows], "s-", label="baseline: fetch + full parse")
    left.axhline(0.5, color="grey", linestyle=":", label="0.5 s target (64 endpoints)")
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    left.set_xlabel("endpoints")
    left.set_ylabel("wall time per round (s)")
    left.legend(fontsize=7)
    right.plot(counts, [r["bridge_mb_s"] for r in rows], "o-", label="otel-bridge collection")
    right.plot(counts, [r["bridge_round_only_mb_s"] for r in rows], "o--", label="otel-bridge scrape round only")
    right.plot(counts, [r["baseline_mb_s"] for r in rows], "s-", label="baseline")
    right.set_xscale("log", base=2)
    right.set_xlabel("endpoints")
    right.set_ylabel("MB of exposition per second")
    right.legend(fontsize=7)
    fig.suptitle("ScrapeProducer scaling (20 of the capture's families configured, 2 cores)")
    save_figure(fig, NAME)
