"""The JSONL tracker on a filesystem that fills up and then gets space back (issue 14 point 5).

A real 64 KiB tmpfs: the run directory lives there, a filler file takes the last free page while steps are written,
and is removed while the tracker is still retrying. Every record must be in the file at most once, the file must be
valid JSON Lines in step order, and the report's failed steps must be exactly those missing from the file.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_bridge import Bridge
from tests.faults.support import base_config
from tests.helpers.small_disk import CannotMountError, fill, small_tmpfs

# Records of ~6 KB: each one needs new tmpfs pages, so a full filesystem fails it (a short record could still fit
# in the last page the file already has).
KEYS = [f"actor/layer_{i:03d}/grad_norm_with_a_long_descriptive_name" for i in range(100)]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    try:
        with small_tmpfs(tmp_path / "disk", "64k") as mount_point:
            yield mount_point
    except CannotMountError as err:
        pytest.skip(str(err))


def _log(bridge: Bridge, step: int) -> None:
    bridge.log({key: float(step) + i / 1000 for i, key in enumerate(KEYS)}, step=step)


def test_disk_full_then_space_back_writes_each_record_once_in_order(small_disk: Path) -> None:
    config = base_config(small_disk, "run", delivery={"backend_retries": 8, "backend_backoff_s": 0.02})
    bridge = Bridge.from_config(config)
    jsonl = small_disk / "run" / "metrics.jsonl"
    for step in range(3):
        _log(bridge, step)
    bridge.collect(2)
    assert bridge.meter_provider.force_flush()
    filler = small_disk / "filler"
    fill(filler)
    for step in range(3, 6):
        _log(bridge, step)
    bridge.commit()
    time.sleep(0.3)  # the tracker is retrying step 3 against a full disk
    filler.unlink()
    for step in range(6, 9):
        _log(bridge, step)
    report = bridge.close(timeout_s=30)
    assert bridge.health.counter("otel_bridge/backend_errors", labels={"backend": "jsonl"}) > 0  # the disk was full
    text = jsonl.read_text()
    assert text.endswith("\n")
    steps = [json.loads(line)["step"] for line in text.splitlines()]  # every line is valid JSON
    assert steps == sorted(set(steps)), steps  # at most once, in step order
    (status,) = report.backends
    assert sorted(set(range(9)) - set(steps)) == list(status.failed_steps), (steps, status)
    assert {0, 1, 2, 6, 7, 8} <= set(steps)
    assert 3 in steps  # space came back while step 3 was still being retried
    assert os.path.getsize(jsonl) == len(text.encode())
