"""RateLimitedLogger: once per key per interval, with a count of what was held back (driven by a fake clock)."""

from __future__ import annotations

import logging

import pytest

from otel_bridge.ratelimit import RateLimitedLogger

LOGGER = "otel_bridge.tests.ratelimit"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def warn(clock: FakeClock) -> RateLimitedLogger:
    return RateLimitedLogger(logging.getLogger(LOGGER), interval_s=60.0, clock=clock)


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_logs_once_then_suppresses_within_the_interval(
    warn: RateLimitedLogger, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    assert warn.warning("q", "query %s failed", "a") is True
    clock.now += 1.0
    assert warn.warning("q", "query %s failed", "b") is False
    clock.now += 58.9
    assert warn.warning("q", "query %s failed", "c") is False
    assert messages(caplog) == ["query a failed"]
    assert caplog.records[0].levelno == logging.WARNING


def test_logs_again_after_the_interval_with_the_repeat_count(
    warn: RateLimitedLogger, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    warn.warning("q", "query %s failed", "a")
    for _ in range(3):
        clock.now += 10.0
        warn.warning("q", "query %s failed", "b")
    clock.now = 1060.0  # exactly one interval after the first message
    assert warn.warning("q", "query %s failed", "c") is True
    assert messages(caplog) == ["query a failed", "query c failed (repeated 3 more times since last logged)"]


def test_repeat_count_restarts_after_each_logged_message(
    warn: RateLimitedLogger, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    warn.warning("q", "down")
    clock.now += 1.0
    warn.warning("q", "down")
    clock.now += 60.0
    warn.warning("q", "down")  # logged with 1 repeat, at t=1061
    clock.now += 30.0
    assert warn.warning("q", "down") is False  # within the interval of the second logged message
    clock.now += 30.0
    warn.warning("q", "down")
    clock.now += 60.0
    warn.warning("q", "down")  # nothing suppressed since the last one: no suffix
    assert messages(caplog) == [
        "down",
        "down (repeated 1 more times since last logged)",
        "down (repeated 1 more times since last logged)",
        "down",
    ]


def test_keys_are_independent(warn: RateLimitedLogger, clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    assert warn.warning("a", "metric a missing") is True
    assert warn.warning("b", "metric b missing") is True
    clock.now += 1.0
    assert warn.warning("a", "metric a missing") is False
    assert messages(caplog) == ["metric a missing", "metric b missing"]


def test_error_level(warn: RateLimitedLogger, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    assert warn.error("e", "backend %s failed", "jsonl") is True
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(logging.ERROR, "backend jsonl failed")]


def test_forget_lets_the_next_message_through_without_a_count(
    warn: RateLimitedLogger, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    warn.warning("q", "down")
    clock.now += 1.0
    warn.warning("q", "down")
    warn.forget("q")
    clock.now += 1.0
    assert warn.warning("q", "down again") is True
    assert messages(caplog) == ["down", "down again"]


def test_zero_interval_logs_everything(clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    warn = RateLimitedLogger(logging.getLogger(LOGGER), interval_s=0.0, clock=clock)
    assert all(warn.warning("q", "x") for _ in range(3))
    assert messages(caplog) == ["x", "x", "x"]


def test_literal_percent_in_a_message_without_args_survives_the_repeat_suffix(
    warn: RateLimitedLogger, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    warn.warning("kv", "KV cache at 100% for 5 steps")
    clock.now += 1.0
    warn.warning("kv", "KV cache at 100% for 5 steps")
    clock.now += 60.0
    warn.warning("kv", "KV cache at 100% for 5 steps")
    assert messages(caplog) == [
        "KV cache at 100% for 5 steps",
        "KV cache at 100% for 5 steps (repeated 1 more times since last logged)",
    ]
