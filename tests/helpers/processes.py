"""This process' children, read from ``/proc`` (Linux): the tests find the scrape child a bridge started, the bench
reads its CPU time."""

from __future__ import annotations

import os
from pathlib import Path

SCRAPE_CHILD = "otel_bridge.producers.scrape.child"


def children(command_part: str = SCRAPE_CHILD, parent: int | None = None) -> list[int]:
    """The running children of ``parent`` (default: this process) whose command line contains ``command_part``."""
    found = []
    for listing in Path(f"/proc/{parent or os.getpid()}/task").glob("*/children"):
        for pid in map(int, listing.read_text().split()):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except OSError:  # exited meanwhile
                continue
            if command_part in command:
                found.append(pid)
    return found
