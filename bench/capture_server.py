"""Many ``/metrics`` endpoints in one process: the real vLLM capture text served on N loopback ports.

Run as ``python -m bench.capture_server --ports N [--capture PATH]``: one asyncio event loop listens on N free ports
of 127.0.0.1 (HTTP/1.1, keep-alive), answers every ``GET`` with the capture bytes, prints the ports as one JSON line
on stdout, and serves until stdin closes (so it dies with its parent). A separate process, so serving does not share
the benchmarked process' GIL; one event loop, so 256 endpoints cost one thread on a 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

CAPTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "vllm" / "metrics-after-requests.txt"


def text_page(body: bytes, content_type: bytes = b"text/plain; version=0.0.4; charset=utf-8") -> bytes:
    """An HTTP/1.1 200 answer carrying ``body``."""
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: " + content_type + b"\r\nContent-Length: " + str(len(body)).encode()
        + b"\r\n\r\n" + body
    )  # fmt: skip


def keep_alive(answer: Callable[[], bytes]) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """A connection handler answering every request on a keep-alive connection with ``answer()``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                if not request:
                    break
                writer.write(answer())
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    return handle


async def _serve(count: int, body: bytes) -> None:
    answer = text_page(body)
    handle = keep_alive(lambda: answer)
    servers = [await asyncio.start_server(handle, "127.0.0.1", 0, backlog=256) for _ in range(count)]
    ports = [s.sockets[0].getsockname()[1] for s in servers]
    sys.stdout.write(json.dumps({"ports": ports, "bytes": len(body)}) + "\n")
    sys.stdout.flush()
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # returns when the parent closes our stdin (or exits)
    # Open keep-alive connections would be cancelled mid-read by asyncio.run()'s teardown and logged as errors; there
    # is nothing to flush or save, so leave at once.
    os._exit(0)


def main() -> None:
    """Entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ports", type=int, required=True)
    parser.add_argument("--capture", type=Path, default=CAPTURE)
    args = parser.parse_args()
    os.nice(19)  # stands for servers on other machines: it must not take CPU from the benchmarked process
    asyncio.run(_serve(args.ports, args.capture.read_bytes()))


if __name__ == "__main__":
    main()
