"""Shared by the tracker read-back tests: a standard set of step records, and a guard that blocks the network.

:func:`block_network` lets sockets reach only loopback addresses (and Unix sockets) and refuses name lookups of any
other host, recording every attempt, so a test can assert that a tracker library tried nothing beyond this machine.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import pytest

from otel_bridge.exporters.record import StepRecord

T0 = 1_700_000_000.25


def make_records(count: int = 200, first_step: int = 1) -> list[StepRecord]:
    """Trainer and infrastructure-like keys; one key appears only every 5th step."""
    records = []
    for index in range(count):
        step = first_step + index
        values = {
            "actor/loss": 1.0 / step,
            "critic/vf_loss": -0.5 * step,
            "trainer.tokens": float(1000 * step),
            "timing s/gen": 1e-4 * step,
            "rollout/vllm/kv_cache_usage_perc/max": 0.01 * (step % 97),
            "rollout/vllm/generation_tokens_total/delta/model_name.m": float(512 * step),
            "otel_bridge/scrape_errors/instance.127.0.0.1_8000": float(step // 50),
        }
        if step % 5 == 0:
            values["rollout/vllm/time_to_first_token_seconds/p99"] = 0.123456789 * step
        records.append(StepRecord(step=step, values=values, time=T0 + 10.0 * step, window_start=T0 + 10.0 * (step - 1)))
    return records


def is_local(host: object) -> bool:
    """Whether ``host`` is a loopback address (or empty / ``localhost``)."""
    if host is None or host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def block_network(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Refuse connections and name lookups beyond loopback for the rest of the test; returns the attempts list."""
    attempts: list[object] = []
    real_connect, real_connect_ex, real_getaddrinfo = (
        socket.socket.connect,
        socket.socket.connect_ex,
        socket.getaddrinfo,
    )

    def allowed(sock: socket.socket, address: Any) -> bool:
        return sock.family == getattr(socket, "AF_UNIX", None) or is_local(address[0])

    def connect(sock: socket.socket, address: Any) -> None:
        if not allowed(sock, address):
            attempts.append(address)
            raise OSError(f"test: connection to {address} blocked")
        real_connect(sock, address)

    def connect_ex(sock: socket.socket, address: Any) -> int:
        if not allowed(sock, address):
            attempts.append(address)
            raise OSError(f"test: connection to {address} blocked")
        return real_connect_ex(sock, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not is_local(host):
            attempts.append(host)
            raise socket.gaierror(f"test: name lookup of {host} blocked")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return attempts
