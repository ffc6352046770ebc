"""Shared pieces of the fault suite: config builders, log counting. The backend double is tests/helpers/backends.py."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from otel_bridge import Bridge


def base_config(tmp_path: Path, name: str, **sections: Any) -> dict[str, Any]:
    """A config writing JSONL under ``tmp_path/name`` with fast warnings off (60 s rate limit, the default)."""
    return {"run": {"name": name, "dir": str(tmp_path)}, **sections}


def count_logs(caplog: pytest.LogCaptureFixture, text: str, level: int = logging.WARNING) -> int:
    """How many captured records at ``level`` or above contain ``text`` in their message."""
    return sum(1 for r in caplog.records if r.levelno >= level and text in r.getMessage())


def rollout_keys(values: dict[str, float]) -> list[str]:
    """The infrastructure keys of a record."""
    return [k for k in values if k.startswith("rollout/")]


def run_steps(bridge: Bridge, steps: int, *, collect: bool = False) -> None:
    """Steps ``0 .. steps-1``, each a ``with bridge.step(n)`` block logging ``actor/loss = n``; with ``collect``, each
    step's record is waited for before the next step begins."""
    for step in range(steps):
        with bridge.step(step):
            bridge.log({"actor/loss": float(step)}, step=step)
        if collect:
            bridge.collect(step)
