"""Read back what a wandb run wrote to its offline transaction log (``run-<id>.wandb``).

Two readers that return the same records:

- ``log`` (the default): a parser of the transaction-log format (wandb's LevelDB-style log: a 7-byte header,
  32 KiB blocks of CRC-checked chunks) decoding each record with wandb's own protobuf,
  ``wandb.proto.wandb_internal_pb2.Record``, in the test's process. wandb no longer ships its Python reader
  (``wandb.sdk.internal.datastore``).
- ``leet``: wandb's own CLI, ``wandb leet inspect --json <file>`` (one JSON object per record), when the
  installed wandb has that subcommand. Each read is a new Python process importing wandb's CLI and a wandb-core
  (0.7 CPU-s), so the suite reads with ``log`` and holds it to ``leet`` in
  ``tests/unit/test_backend_wandb.py::test_the_two_readers_agree``, on a log of several blocks with records that
  span them.
"""

from __future__ import annotations

import functools
import json
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

Reader = Literal["leet", "log"]

_HEADER = struct.Struct("<4sHB")
_HEADER_IDENT = b":W&B"
_HEADER_MAGIC = 0xBEE1
_CHUNK = struct.Struct("<IHB")
BLOCK_SIZE = 32 * 1024
COMPLETE_WITHIN_S = 60.0
_KINDS = {1: "full", 2: "first", 3: "middle", 4: "last"}


def find_transaction_log(path: Path) -> Path:
    """The ``.wandb`` file at ``path``: the file itself, or the only one below a run or wandb directory."""
    if path.is_file():
        return path
    found = sorted(path.rglob("*.wandb"))
    if len(found) != 1:
        raise AssertionError(f"expected one .wandb file under {path}, found {[str(p) for p in found]}")
    return found[0]


@functools.cache
def leet_available() -> bool:
    """Whether the installed wandb CLI has ``wandb leet inspect``."""
    result = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result.returncode == 0 and "--json" in result.stdout


def _records_leet(log_file: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(log_file)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"wandb leet inspect failed ({result.returncode}): {result.stderr.strip()}")
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def chunk_kinds(data: bytes) -> Iterator[tuple[bytes, str]]:
    """Each chunk of the log ``data`` in order: its payload and kind (``full``, ``first``, ``middle`` or ``last``),
    CRCs checked."""
    ident, magic, version = _HEADER.unpack_from(data, 0)
    if ident != _HEADER_IDENT or magic != _HEADER_MAGIC or version != 0:
        raise AssertionError(f"not a wandb transaction log: header {ident!r} {magic:#x} {version}")
    pos = _HEADER.size
    while pos + _CHUNK.size <= len(data):
        left_in_block = BLOCK_SIZE - pos % BLOCK_SIZE
        if left_in_block < _CHUNK.size:
            pos += left_in_block  # block trailer padding
            continue
        crc, length, kind = _CHUNK.unpack_from(data, pos)
        if kind == 0 and length == 0:
            pos += left_in_block  # zero padding up to the next block
            continue
        start = pos + _CHUNK.size
        payload = data[start : start + length]
        if len(payload) < length:
            return  # a record still being written
        if zlib.crc32(payload, zlib.crc32(bytes([kind]))) != crc:
            raise AssertionError(f"CRC mismatch in the wandb transaction log at byte {pos}")
        if kind not in _KINDS:
            raise AssertionError(f"unknown chunk type {kind} in the wandb transaction log at byte {pos}")
        pos = start + length
        yield payload, _KINDS[kind]


def _payloads(data: bytes) -> Iterator[bytes]:
    """The payloads of the log's records, reassembled from first, middle and last chunks."""
    pending = b""
    for payload, kind in chunk_kinds(data):
        if kind == "full":
            yield payload
        elif kind == "first":
            pending = payload
        elif kind == "middle":
            pending += payload
        else:
            yield pending + payload
            pending = b""


def _records_log(log_file: Path) -> list[dict[str, Any]]:
    from wandb.proto import wandb_internal_pb2

    records: list[dict[str, Any]] = []
    for payload in _payloads(log_file.read_bytes()):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        entry: dict[str, Any] = {"type": kind}
        if kind == "history":
            item = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in record.history.item}
            entry["history"] = {"item": item, "step": {"num": record.history.step.num}}
        elif kind == "metric":
            entry["metric"] = {"name": record.metric.name, "step_metric": record.metric.step_metric}
        records.append(entry)
    return records


def read_records(path: Path, reader: Reader = "log") -> list[dict[str, Any]]:
    """Every record of a finished run's transaction log, as dicts with a ``type`` and a payload under that name.

    wandb-core writes the log in 32 KiB blocks and may still hold the last one when ``run.finish()`` returns: the
    read waits (at most :data:`COMPLETE_WITHIN_S`) for the log to end with the run's ``exit`` record."""
    log_file = find_transaction_log(path)
    records = _complete_records(log_file)
    return _records_leet(log_file) if reader == "leet" else records


def _complete_records(log_file: Path) -> list[dict[str, Any]]:
    """The records of ``log_file`` once its last is the run's ``exit`` record, read again each time the file grows."""
    deadline = time.monotonic() + COMPLETE_WITHIN_S
    size = -1
    while True:
        if (now := log_file.stat().st_size) != size:
            size = now
            records = _records_log(log_file)
            if records and records[-1]["type"] == "exit":
                return records
        if time.monotonic() > deadline:
            last = records[-1]["type"] if records else None
            raise AssertionError(
                f"{log_file} holds no exit record within {COMPLETE_WITHIN_S:g} s (its last record: {last}): read a "
                "run once it is finished"
            )
        time.sleep(0.01)


def read_history(path: Path, reader: Reader = "log") -> list[dict[str, Any]]:
    """The run's history rows in the order written, each ``{key: value}`` including ``_step``."""
    return [record["history"]["item"] for record in read_records(path, reader) if record["type"] == "history"]


def read_metric_definitions(path: Path, reader: Reader = "log") -> dict[str, str]:
    """``define_metric`` records: metric name (as escaped by the caller) -> its step metric ('' for none)."""
    definitions: dict[str, str] = {}
    for record in read_records(path, reader):
        if record["type"] == "metric":
            metric = record["metric"]
            definitions[metric.get("name", "")] = metric.get("step_metric", "")
    return definitions
