"""The phase half of the :class:`~otel_bridge.Bridge` facade: ``with bridge.phase("gen")``.

A phase boundary costs what a step boundary costs, and less: a timestamp, the producers' non-blocking ``on_boundary(t)``
(the scrape producer scrapes on its sampler thread, the PromQL producer notes the time) and a list append. The phases'
windows are produced on the delivery worker with the step's (:mod:`otel_bridge.pipeline.phases`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from otel_bridge.pipeline.phases import PhaseLog


class PhaseMarks:
    """``phase``, ``begin_phase`` and ``end_phase``; mixed into :class:`~otel_bridge.Bridge`."""

    _phase_log: PhaseLog

    def _check_open(self) -> None:
        raise NotImplementedError

    def _boundary(self, t: float) -> None:
        raise NotImplementedError

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Mark phase ``name`` of the current step (``gen``, ``update_actor``...): its window is the ``with`` block.

        The step's record gets ``phase/<name>/seconds`` and every configured infrastructure statistic computed over
        the phase's window, as ``phase/<name>/<key>`` (README: Phases and traces). Phases do not nest; a name used
        twice in one step becomes ``<name>_2``. Same as :meth:`begin_phase` + :meth:`end_phase`.
        """
        self.begin_phase(name)
        try:
            yield
        finally:
            self.end_phase(name)

    def begin_phase(self, name: str) -> None:
        """Start phase ``name`` now (for callbacks that cannot wrap a ``with`` block).

        Raises :class:`~otel_bridge.errors.StepOrderError` while another phase is open.
        """
        self._check_open()
        t = time.time()
        self._phase_log.begin(name, t)
        self._boundary(t)

    def end_phase(self, name: str) -> None:
        """End phase ``name`` now. A phase still open at a step boundary ends there (with a warning); ending it
        afterwards does nothing."""
        t = time.time()
        if self._phase_log.end(name, t):
            self._boundary(t)

    @property
    def current_phase(self) -> str | None:
        """The phase open now, or ``None``."""
        return self._phase_log.open_name
