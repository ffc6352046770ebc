"""What every check of ``otel-bridge doctor`` works on: one :class:`DoctorContext` per run, holding the command's
arguments, what earlier checks learnt (the configured queries, Prometheus' scrape interval) and the outcomes, one
:class:`Check` each, secrets scrubbed from every text.

The checks themselves are plain functions over it, by what they look at: this machine
(:mod:`~otel_bridge.cli.doctor.local`), Prometheus (:mod:`~otel_bridge.cli.doctor.prometheus`), the endpoints and
the configured metrics (:mod:`~otel_bridge.cli.doctor.metrics`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, TypeVar

from otel_bridge.cli.inputs import without_url_passwords
from otel_bridge.producers import MetricQuery
from otel_bridge.producers.promql import Store

MAX_TEXT_CHARS: Final = 2000
"""The most characters of a check's detail or fix that doctor prints (the rest is counted): a server's answer (a
version string, a scrape error) can be any length."""
MAX_LISTED: Final = 5
"""The most items (targets, series) a check lists by name; the rest are counted."""

T = TypeVar("T")
Status = Literal["pass", "fail", "warn", "skip"]
STATUSES: tuple[Status, ...] = ("pass", "fail", "warn", "skip")


@dataclass(frozen=True, slots=True)
class Check:
    """The outcome of one check: ``fix`` says what to change when it did not pass."""

    name: str
    status: Status
    detail: str
    fix: str | None = None


class DoctorContext:
    """One doctor run: its arguments, what the checks found out so far, and their outcomes (:attr:`checks`)."""

    def __init__(
        self,
        config_path: Path | None,
        *,
        ray_address: str = "auto",
        prometheus_url: str | None = None,
        config_reason: str = "--config",
    ) -> None:
        self.config_path = config_path
        self.config_reason = config_reason
        """Why this config file (see :mod:`otel_bridge.cli.config_file`)."""
        self.ray_address = ray_address
        self.prometheus_url = prometheus_url
        self.checks: list[Check] = []
        self._secrets: list[str] = []
        self.queries: list[MetricQuery] = []
        """The configured metrics, resolved (set by the ``config`` check)."""
        self.default_preset: str | None = None
        """The preset checked when the config lists no metrics."""
        self.scrape_interval_s: float | None = None
        """Prometheus' scrape interval, from its targets list (set by the ``step boundaries`` check)."""
        self.store: Store | None = None
        """What ``prometheus.url`` is and what its queries can do (set by the ``prometheus`` check)."""
        self.boundary_detail: str | None = None
        """The ``step boundaries`` warning's finding under ``prometheus.boundary: auto``, which the ``step`` check
        settles: it passes when the run's producer observes the boundaries by its own scrapes."""

    def add_secrets(self, secrets: Sequence[str]) -> None:
        """Scrub ``secrets`` (every form a secret takes on the wire) from the outcomes recorded from now on."""
        self._secrets.extend(secrets)

    def _scrub(self, text: str | None) -> str | None:
        if text is None:
            return None
        # Cut first to a few times what is shown: scrubbing a megabyte of a server's text takes minutes (the URL
        # pattern rescans every run of letters), and a secret starting in the part shown is still whole in this.
        text = text[: 4 * MAX_TEXT_CHARS]
        text = without_url_passwords(text)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        if len(text) > MAX_TEXT_CHARS:  # cut again after scrubbing: a secret cut in two would not be found
            text = f"{text[:MAX_TEXT_CHARS]}... (cut at {MAX_TEXT_CHARS} characters)"
        return text

    def add(self, name: str, status: Status, detail: str, fix: str | None = None) -> Check:
        """Record one check's outcome, its texts scrubbed and at most :data:`MAX_TEXT_CHARS` long."""
        check = Check(name, status, self._scrub(detail) or "", self._scrub(fix))
        self.checks.append(check)
        return check

    def settle(self, name: str, status: Status, detail: str) -> None:
        """Replace the outcome of the check ``name`` recorded earlier (a later check learnt what it could not)."""
        self.checks = [Check(name, status, self._scrub(detail) or "") if c.name == name else c for c in self.checks]

    @property
    def ok(self) -> bool:
        """No check failed."""
        return all(c.status != "fail" for c in self.checks)


def listed(items: Sequence[T], describe: Callable[[T], str], separator: str = "; ") -> str:
    """The first :data:`MAX_LISTED` of ``items`` described, then how many more there are (``a; b; ... and 99995
    more``): only those shown are described."""
    shown = separator.join(describe(item) for item in items[:MAX_LISTED])
    return shown + (f"{separator}... and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else "")
