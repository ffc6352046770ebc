"""Where a parallel run's wall time went, from the JUnit report ``make test`` writes: this plugin records each test's
worker, start and the CPU seconds it took in it (``worker``, ``started``, ``cpu_s``), tests/plugins/machine.py the time
another worker's hold kept it waiting (``held_back_s``, ``hold_waited_s``).

``python -m tests.plugins.timeline [.test-times/junit.xml]`` prints, per worker, the seconds it ran tests, waited for
the machine's locks and sat idle (between its tests and after its last one until the run's end), the groups that
ran last (the run's tail), and the longest groups with the CPU they took: a group whose CPU is far below its seconds
waits on wall-clock intervals, one near them (or above: threads, children) computes.
"""

from __future__ import annotations

import itertools
import os
import resource
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.plugins.tiers import TIMINGS, group_of

__all__ = ["Span", "spans", "summary"]

_CPU_BEFORE = pytest.StashKey[float]()


@dataclass(frozen=True)
class Span:
    """One test: its worker, when it began (epoch seconds), how long another worker's hold kept it from starting
    (``held_back_s``, before its setup), how long it took (setup, call and teardown: ``seconds``) and how much of that
    it waited for a hold of its own (``hold_waited_s``), and the CPU seconds its worker and the processes it waited for
    took meanwhile (``cpu_s``: a server a module shares counts in the test that stops it)."""

    nodeid: str
    worker: str
    started: float
    held_back_s: float
    seconds: float
    hold_waited_s: float
    cpu_s: float = 0.0

    @property
    def ended(self) -> float:
        return self.started + self.held_back_s + self.seconds


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    item.user_properties.append(("worker", os.environ.get("PYTEST_XDIST_WORKER", "main")))
    item.user_properties.append(("started", f"{time.time():.3f}"))
    item.stash[_CPU_BEFORE] = _cpu_s()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    if call.when == "teardown" and _CPU_BEFORE in item.stash:  # the report the JUnit file takes the properties from
        item.user_properties.append(("cpu_s", f"{_cpu_s() - item.stash[_CPU_BEFORE]:.3f}"))
    return (yield)


def _cpu_s() -> float:
    """User and system seconds of this process and of its children that ended and were waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def spans(report: Path = TIMINGS) -> list[Span]:
    """The tests of ``report`` that carry a worker and a start (those of a run with tiers.py's timeline)."""
    found = []
    for case in ET.parse(report).getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        if "worker" not in props or "started" not in props:
            continue
        classname, name = case.get("classname", ""), case.get("name", "")
        nodeid = f"{classname.replace('.', '/')}.py::{name}"
        started, seconds = float(str(props["started"])), float(case.get("time", 0))
        held_back, hold_waited = float(props.get("held_back_s") or 0.0), float(props.get("hold_waited_s") or 0.0)
        cpu = float(props.get("cpu_s") or 0.0)
        found.append(Span(nodeid, str(props["worker"]), started, held_back, seconds, hold_waited, cpu))
    return sorted(found, key=lambda span: span.started)


def summary(found: list[Span], tail: int = 8, longest: int = 25) -> str:
    """Per worker: tests, locks, idle, CPU; then the ``tail`` groups that ended last and the ``longest`` groups."""
    if not found:
        return "no timeline in the report (a run before tests/plugins/tiers.py recorded one)"
    begin, end = min(s.started for s in found), max(s.ended for s in found)
    lines = [f"run: {end - begin:.0f} s from the first test's start to the last one's end, {len(found)} tests"]
    by_worker: dict[str, list[Span]] = defaultdict(list)
    for span in found:
        by_worker[span.worker].append(span)
    for worker, mine in sorted(by_worker.items()):
        ran = sum(s.seconds - s.hold_waited_s for s in mine)
        waited = sum(s.held_back_s + s.hold_waited_s for s in mine)
        gaps = sum(max(0.0, b.started - a.ended) for a, b in itertools.pairwise(mine))
        after = end - mine[-1].ended
        lines.append(
            f"{worker}: {len(mine)} tests, {ran:.0f} s running ({sum(s.cpu_s for s in mine):.0f} CPU-s), "
            f"{waited:.0f} s waiting for another worker's hold, {gaps:.0f} s between tests, "
            f"idle {after:.0f} s at the end"
        )
    groups: dict[str, list[Span]] = defaultdict(list)
    for span in found:
        groups[group_of(span.nodeid)].append(span)
    last = sorted(groups.items(), key=lambda item: max(s.ended for s in item[1]))[-tail:]
    lines.append("groups that ended last (group: worker, began, ended, seconds, from the run's start):")
    for group, mine in last:
        first, final = min(s.started for s in mine), max(s.ended for s in mine)
        lines.append(
            f"  {group}: {mine[0].worker}, {first - begin:.0f} -> {final - begin:.0f} s, "
            f"{sum(s.seconds for s in mine):.0f} s"
        )
    lines.append("longest groups (seconds running, CPU seconds):")
    for group, mine in sorted(groups.items(), key=lambda item: -sum(s.seconds for s in item[1]))[:longest]:
        ran = sum(s.seconds - s.hold_waited_s for s in mine)
        lines.append(f"  {ran:6.0f} s {sum(s.cpu_s for s in mine):6.0f} CPU-s  {group}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(spans(Path(sys.argv[1]) if len(sys.argv) > 1 else TIMINGS)))
