"""Many simulated vLLM replicas in one process, whose counters move with a known truth: the real vLLM capture served on
N loopback ports, three of its counters rendered at each request from a per-replica clock.

Run as ``python -m bench.replica_server --ports N --t0 T [--capture PATH]``: one asyncio event loop listens on N free
ports of 127.0.0.1 (HTTP/1.1, keep-alive) and on one more, the *counting* port, which answers ``GET`` with how many
pages and bytes the replicas have served so far (JSON); it prints the replicas' ports as one JSON line on stdout and
serves until stdin closes (so it dies with its parent).

Replica ``i`` serves the capture (``tests/fixtures/vllm/metrics-after-requests.txt``) with
``vllm:request_success_total{finished_reason="length"}``, ``vllm:generation_tokens_total`` and
``vllm:prompt_tokens_total`` replaced by :func:`requests_done` at the moment it answers: requests complete one by one
in bursts at the replica's own rate (:func:`replica_rate`, :data:`BUSY_PERIOD_S`), each with
:data:`GENERATION_TOKENS` and :data:`PROMPT_TOKENS`. The counts are a step function of time known to the benchmark,
so the truth of any window ``(start, end]`` is exact (:func:`window_truth`), and a reading taken after a boundary
moves what completed in between into the wrong step.

Why not :mod:`otel_bridge.tools.simulation`: its :class:`~otel_bridge.tools.simulation.VLLMServer` is one
``ThreadingHTTPServer`` (a thread per server and per request) rendering prometheus_client's registry at each scrape;
a thousand of them in a process of a 2-core machine measure the simulator. Here a replica costs a listening socket
and a byte join per page.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.capture_server import keep_alive, text_page

CAPTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "vllm" / "metrics-after-requests.txt"
GENERATION_TOKENS = 16
PROMPT_TOKENS = 6
_MOVING = {
    'vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} ': 1,
    'vllm:generation_tokens_total{engine="0",model_name="tiny"} ': GENERATION_TOKENS,
    'vllm:prompt_tokens_total{engine="0",model_name="tiny"} ': PROMPT_TOKENS,
}
"""The moving series (their sample line up to the value) -> what one completed request adds."""


BUSY_PERIOD_S = 8.0
"""The replicas complete requests in bursts: busy together for half of every :data:`BUSY_PERIOD_S`, idle for the other
half (rollout servers idle while the trainer updates), each starting up to :data:`JITTER_S` after the others. Steady
rates would hide boundary errors: a window shifted in time would hold as many requests as the true one."""
JITTER_S = 0.5


def replica_rate(index: int) -> float:
    """Requests replica ``index`` completes per second while busy: 3-9, spread so that replicas complete at different
    moments (1.5-4.5 on average)."""
    return 3.0 + 6.0 * ((index * 0.6180339887498949) % 1.0)


def _busy_s(index: int, elapsed: float) -> float:
    """Seconds replica ``index`` has been busy ``elapsed`` seconds into its own schedule."""
    half = BUSY_PERIOD_S / 2
    periods, into = divmod(elapsed, BUSY_PERIOD_S)
    return periods * half + min(into, half)


def requests_done(index: int, t: float, t0: float) -> int:
    """Requests replica ``index`` has completed by unix time ``t`` since ``t0`` (0 before it)."""
    if t <= t0:
        return 0
    offset = -((index * 0.3819660112501051) % 1.0) * JITTER_S
    phase = (index * 0.7548776662466927) % 1.0
    busy = _busy_s(index, t - t0 + offset) - _busy_s(index, offset)
    return math.floor(replica_rate(index) * busy + phase) - math.floor(phase)


def window_truth(replicas: int, start: float, end: float, t0: float) -> int:
    """Requests completed in ``(start, end]`` by replicas ``0..replicas-1``."""
    return sum(requests_done(i, end, t0) - requests_done(i, start, t0) for i in range(replicas))


def _template(capture: bytes) -> list[tuple[bytes, int]]:
    """The capture split after each moving series' name and labels: ``(text before the value, tokens per request)``
    pieces, the last with 0 (its value is not replaced)."""
    pieces: list[tuple[bytes, int]] = []
    chunk: list[str] = []
    for line in capture.decode().splitlines(keepends=True):
        for prefix, per in _MOVING.items():
            if line.startswith(prefix):
                chunk.append(prefix)
                pieces.append(("".join(chunk).encode(), per))
                chunk = ["\n"]
                break
        else:
            chunk.append(line)
    if len(pieces) != len(_MOVING):
        raise RuntimeError(f"the capture lacks some of the moving series {list(_MOVING)}")
    pieces.append(("".join(chunk).encode(), 0))
    return pieces


async def _serve(count: int, capture: bytes, t0: float) -> None:
    pieces = _template(capture)
    served = {"pages": 0, "bytes": 0}

    def page(index: int) -> bytes:
        done = requests_done(index, time.time(), t0)
        answer = text_page(
            b"".join(piece + (f"{float(100 + done * per)}".encode() if per else b"") for piece, per in pieces)
        )
        served["pages"] += 1
        served["bytes"] += len(answer)
        return answer

    def handler(index: int) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        return keep_alive(lambda: page(index))

    counting = keep_alive(lambda: text_page(json.dumps(served).encode(), b"application/json"))
    servers = [await asyncio.start_server(handler(i), "127.0.0.1", 0, backlog=256) for i in range(count)]
    counter = await asyncio.start_server(counting, "127.0.0.1", 0)
    ports = [s.sockets[0].getsockname()[1] for s in servers]
    sys.stdout.write(json.dumps({"ports": ports, "counting_port": counter.sockets[0].getsockname()[1]}) + "\n")
    sys.stdout.flush()
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # returns when the parent closes our stdin (or exits)
    os._exit(0)  # nothing to flush; open keep-alive connections would be cancelled mid-read and logged


def main() -> None:
    """Entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ports", type=int, required=True)
    parser.add_argument("--t0", type=float, required=True, help="unix time the replicas' counting starts")
    parser.add_argument("--capture", type=Path, default=CAPTURE)
    args = parser.parse_args()
    asyncio.run(_serve(args.ports, args.capture.read_bytes(), args.t0))


if __name__ == "__main__":
    main()
