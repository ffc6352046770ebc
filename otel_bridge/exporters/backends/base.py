"""The backend protocol: what every tracker backend, built-in or plugin, provides.

Creating backends from configuration is :mod:`otel_bridge.exporters.backends.registry`'s job; validating their
options, :mod:`otel_bridge.exporters.backends.options`'.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from otel_bridge.exporters.record import StepRecord


@runtime_checkable
class Backend(Protocol):
    """A tracker that receives one :class:`StepRecord` per training step.

    ``write`` is called in step order, always from the same thread. A backend raises
    :class:`~otel_bridge.errors.BackendError` when it cannot write; the caller isolates it from the other
    backends.
    """

    name: str

    def write(self, record: StepRecord) -> None:
        """Log one step's record."""

    def flush(self) -> None:
        """Push everything written so far to the tracker's storage."""

    def close(self) -> None:
        """Flush and release the tracker's resources. Closing twice is allowed.

        A backend may also define ``verify() -> Sequence[str]``, called after ``close()``: what its storage does not
        hold of what was written (the JSONL backend re-reads its file); each problem makes the delivery report
        incomplete. A backend whose tracker cannot take every key defines ``key_rule``, a
        :class:`~otel_bridge.exporters.naming.KeyRule`: it then receives records with the keys it cannot take renamed
        by that rule, and the records' notes say which (MLflow and wandb do).
        """
