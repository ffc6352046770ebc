"""Phases: the named, sequential parts of a training step (``gen``, ``update_actor``...), each with its own window.

``with bridge.phase("gen")`` (or ``begin_phase``/``end_phase``) marks ``(enter, exit]`` like a step, and the step's
record gets, per phase, its duration and the same infrastructure statistics as the step, computed over the phase's
window. Phases do not nest and do not overlap; a step may have gaps between phases (time spent in no phase) and may
repeat a name (verl's asynchronous trainers time one ``gen`` per local update): by default (``naming.phase_repeats:
sum``) the occurrences share the name as their key, and the step's record holds one set of keys per name, their seconds
and statistics over all occurrences; with ``each`` the second ``gen`` of a step is recorded as ``gen_2``, the third as
``gen_3``.

A phase belongs to the step record of the next step boundary: the step open around it (``with bridge.step``), or,
in a loop that only calls ``bridge.log(metrics, step)`` at the end of each step (verl's), the step that log closes.

This module is the training-thread bookkeeping only (no I/O): :class:`PhaseLog` turns begin/end calls into
:class:`Phase` values that travel with the step to the delivery worker.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from otel_bridge.errors import InvalidPhaseError, StepOrderError
from otel_bridge.window import StepWindow

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Phase:
    """One ended phase: ``name`` as given, ``key`` its record key (the name; with ``phase_repeats: each`` unique
    within its step: ``gen``, ``gen_2``...), ``(start, end]``."""

    name: str
    key: str
    start: float
    end: float

    @property
    def seconds(self) -> float:
        """The phase's duration."""
        return self.end - self.start

    def window(self, step: int) -> StepWindow:
        """The phase as a window of step ``step``: what producers compute the phase's statistics over."""
        return StepWindow(step, self.start, self.end, phase=self.key)


class PhaseLog:
    """The phases since the last step boundary, in order. Used on the training thread only.

    ``repeats`` is ``naming.phase_repeats``: ``sum`` keys every occurrence of a name by the name, ``each`` numbers
    the repeats (``gen_2``...)."""

    def __init__(self, repeats: str = "sum") -> None:
        self._each = repeats == "each"
        self._open: tuple[str, float] | None = None
        self._ended: list[Phase] = []
        self._auto_closed: str | None = None
        self._keys: set[str] = set()  # the keys of self._ended
        self._repeats: dict[str, int] = {}  # name -> the suffix its next repeat tries first: linear in a step's phases

    @property
    def open_name(self) -> str | None:
        """The phase open now, if any."""
        return None if self._open is None else self._open[0]

    def begin(self, name: str, t: float) -> None:
        """Open phase ``name`` at ``t``; raises :class:`StepOrderError` while another phase is open."""
        check_phase_name(name)
        if self._open is not None:
            raise StepOrderError(
                f"phase {name!r} began while phase {self._open[0]!r} is still open: phases do not nest; "
                f"end {self._open[0]!r} first"
            )
        self._open, self._auto_closed = (name, t), None

    def end(self, name: str, t: float) -> bool:
        """End phase ``name`` at ``t``. Returns ``False`` (nothing to do) when a step boundary already ended it;
        raises :class:`StepOrderError` when ``name`` is not the open phase."""
        check_phase_name(name)
        if self._open is None and self._auto_closed == name:
            self._auto_closed = None
            return False
        if self._open is None or self._open[0] != name:
            raise StepOrderError(f"end_phase({name!r}) without begin_phase({name!r}) (open phase: {self.open_name})")
        start = self._open[1]
        self._open = None
        self._ended.append(Phase(name, self._unique(name) if self._each else name, start, max(start, t)))
        return True

    def _unique(self, name: str) -> str:
        n = self._repeats.get(name, 1)
        key = name if n == 1 else f"{name}_{n}"
        while key in self._keys:
            n += 1
            key = f"{name}_{n}"
        self._repeats[name] = n + 1
        self._keys.add(key)
        return key

    def take(self, boundary: float) -> tuple[Phase, ...]:
        """The phases of the step whose boundary is ``boundary``; a phase still open is ended there (logged)."""
        if self._open is not None:
            name = self._open[0]
            _log.warning("otel-bridge: phase %r was still open at the step boundary; it ends there", name)
            self.end(name, boundary)
            self._auto_closed = name
        ended, self._ended = tuple(self._ended), []
        self._keys.clear()
        self._repeats.clear()
        return ended


def check_phase_name(name: object) -> None:
    """Raise :class:`InvalidPhaseError` unless ``name`` is a non-empty string."""
    if not isinstance(name, str) or not name.strip():
        shown = repr(name) if isinstance(name, str) else f"a {type(name).__name__}"
        raise InvalidPhaseError(f"a phase needs a non-empty string as its name, got {shown[:80]}")
