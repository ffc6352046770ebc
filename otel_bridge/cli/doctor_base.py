"""The records of ``otel-bridge doctor``: one :class:`Check` per outcome, secrets scrubbed from every text."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from otel_bridge.producers.metric_set import MetricQuery

Status = Literal["pass", "fail", "warn", "skip"]
STATUSES: tuple[Status, ...] = ("pass", "fail", "warn", "skip")


@dataclass(frozen=True, slots=True)
class Check:
    """The outcome of one check: ``fix`` says what to change when it did not pass."""

    name: str
    status: Status
    detail: str
    fix: str | None = None


class CheckRecorder:
    """Collects the checks of one doctor run; the check kinds (config and trackers, Prometheus, metrics) extend it."""

    def __init__(
        self, config_path: Path | None, *, ray_address: str = "auto", prometheus_url: str | None = None
    ) -> None:
        self.config_path = config_path
        self.ray_address = ray_address
        self.prometheus_url = prometheus_url
        self.checks: list[Check] = []
        self._secrets: list[str] = []
        self.queries: list[MetricQuery] = []
        self.default_preset: str | None = None  # the preset checked when the config lists no metrics
        self.scrape_interval_s: float | None = None  # Prometheus' scrape interval, from its targets list

    def _scrub(self, text: str | None) -> str | None:
        if text is None:
            return None
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def add(self, name: str, status: Status, detail: str, fix: str | None = None) -> Check:
        """Record one check's outcome."""
        check = Check(name, status, self._scrub(detail) or "", self._scrub(fix))
        self.checks.append(check)
        return check

    @property
    def ok(self) -> bool:
        """No check failed."""
        return all(c.status != "fail" for c in self.checks)
