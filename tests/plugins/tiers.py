"""The suite's tiers: which tests need a server, how parallel workers share the suite, where the timings go.

``server`` marks a test that starts a server process or needs a server's binary: Prometheus (Debian's or the 3.16
peer), VictoriaMetrics, the collector, promtool, a real vLLM, the session's Ray cluster, a real ``mlflow server``.
The quick tier (``make check``) runs the others. The marker is set here by rule, never by hand, and the rule is
checked while the tests run:

- a test module that holds (imports) anything of :data:`SERVER_HELPERS`, directly or through a ``tests.*`` support
  module it imports from (one level: ``tests/deploy/support.py`` runs promtool), needs a server;
- so does a test that takes a fixture of :data:`SERVER_FIXTURES` (``prometheus``, ``ray_cluster``, ...);
- a test without the marker that starts a :class:`~tests.helpers.prometheus_server.ServerProcess` fails, naming this
  module: the rule missed it, extend the rule.

Parallel workers (``pytest -n 4 --dist loadgroup``, ``make test``): a module's tests form one group, so they run in one
worker, one after another, and its module-scoped servers are shared as they are in one process; the modules that take
the session's Ray cluster share one group (one Ray per run, not per worker), and so do the modules that declare one
``WORKER_GROUP`` (a module-level ``WORKER_GROUP = "verl"``): those that import the same framework of seconds into the
test process (verl with torch: 5 CPU-s), which one worker then imports once. A module whose tests share servers in
parts (one run per case and Prometheus version, say) declares the parts: a module-level
``worker_group(test: str) -> str`` maps a test's name (with its parameters) to its part, and each part is a group of
its own; a part named :data:`SATURATING` joins the one group of every module's tests that saturate the machine, so
two of them never sit in two workers waiting for each other's hold. The groups are scheduled here
(:func:`pytest_xdist_make_scheduler`) and marked ``xdist_group`` for the record.
They are handed out in this order (while the saturating group runs, to its worker and :data:`SATURATED_WORKERS` - 1
others; the rest wait until it is done):

1. groups with a test marked ``saturates`` (it holds the whole machine, tests/plugins/machine.py);
2. groups that need no server: they run beside a saturating test, on the workers it would leave idle;
3. the rest, longest first by the times of the last run on this clone (the JUnit report ``make test`` writes,
   :data:`TIMINGS`) when there is one, else the committed ones (:data:`DURATIONS`), else the directories whose
   modules start servers first, so a long group does not end the run alone on one worker.

Every worker collects every test module, so collection imports none of :data:`HEAVY_MODULES` (a test imports them
when it runs: ``tests/helpers/imported_when_used.py``); a collection that does fails, naming the module.
"""

from __future__ import annotations

import functools
import importlib
import json
import re
import sys
import threading
import types
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import prometheus_server

#: Modules whose objects start a server process or run a server's binary.
SERVER_HELPERS = frozenset(
    {
        "tests.helpers.prometheus_server",
        "tests.helpers.peers",
        "tests.helpers.victoriametrics",
        "tests.helpers.vllm_server",
        "tests.helpers.collector",
        "tests.helpers.remote_write",
        "tests.ray_fixtures",
    }
)
#: Fixtures that start one (``prometheus_version`` parametrizes a test by the Prometheus it starts).
SERVER_FIXTURES = frozenset(
    {"prometheus", "_prometheus_pair", "warm_pool", "prometheus_version", "ray_cluster", "mlflow_server"}
)
#: Modules that cost a process seconds to import (torch alone about 2 CPU-s), which collection must not import.
HEAVY_MODULES = (
    "torch",
    "wandb",
    "mlflow",
    "verl",
    "transformers",
    "vllm",
    "ray",
    "matplotlib",
    "trackio",
    "lightning",
)
#: Fixtures of one server per run, not per worker: their modules share one worker.
SESSION_SERVERS = {"ray_cluster": "ray"}
#: A module's declaration of the group it shares with other modules (read from its source, as the session servers'
#: fixtures are), and the prefix of such a group's name.
_WORKER_GROUP = re.compile(r'^WORKER_GROUP = "([a-z_]+)"', re.MULTILINE)
WORKER_GROUP_PREFIX = "shared:"
#: The part (``worker_group``) of the tests that saturate the machine, one group across modules: they hold the machine
#: one at a time (tests/plugins/machine.py), so in two workers the second would wait for the first's hold, idle.
SATURATING = "saturating"
#: The workers that take work while the :data:`SATURATING` group runs: it, and two running the quick tier beside it on
#: the cores its hogs leave (a third beside them, cc29, slowed the timing-checked quick tests past their bounds). Any
#: more (``make test`` runs four) start when it is done: the server tests after it mostly wait on the clock (scrape
#: intervals, server starts), about one core of the two busy.
SATURATED_WORKERS = 3
ROOT = Path(__file__).resolve().parents[2]
#: Where ``make test`` writes the JUnit report (read back to hand out the longest groups first).
TIMINGS = ROOT / ".test-times" / "junit.xml"
#: The seconds per test of a whole run on the 2-core machine, committed (``make durations`` writes it from
#: :data:`TIMINGS`): a fresh clone, as CI's, has no report of its own.
DURATIONS = ROOT / "tests" / "plugins" / "durations.json"
#: Without timings: the directories in the order their modules are handed out (unlisted ones last).
DIRECTORY_ORDER = ("integration", "faults", "deploy", "cli", "security", "docs", "unit")


def _defined_in(value: Any) -> str | None:
    if isinstance(value, types.ModuleType):
        return value.__name__
    module = getattr(value, "__module__", None)
    return module if isinstance(module, str) else None


def _holds_server_helper(module: types.ModuleType, *, depth: int = 1) -> bool:
    for value in vars(module).values():
        origin = _defined_in(value)
        if origin is None:
            continue
        if origin in SERVER_HELPERS:
            return True
        machinery = origin == "tests.conftest" or origin.startswith("tests.plugins")  # every module can hold these
        support = origin.startswith("tests.") and not machinery and origin != module.__name__
        if depth and support and not origin.rpartition(".")[2].startswith("test_"):
            imported = __import__(origin, fromlist=["_"])
            if _holds_server_helper(imported, depth=depth - 1):
                return True
    return False


def needs_server(item: pytest.Item) -> bool:
    """Whether ``item`` needs a server, by the rules of the module docstring."""
    if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    module = getattr(item, "module", None)
    return module is not None and _holds_server_helper(module)


@functools.cache
def _file_group(path: str) -> str:
    """The group of the test file ``path`` (relative to the root): a session server's whose fixture it names (a test
    taking a fixture names it), else the ``WORKER_GROUP`` it declares, else its own path."""
    try:
        source = (ROOT / path).read_text(encoding="utf-8")
    except OSError:
        return path
    declared = _WORKER_GROUP.search(source)
    default = f"{WORKER_GROUP_PREFIX}{declared.group(1)}" if declared else path
    return next((group for fixture, group in SESSION_SERVERS.items() if fixture in source), default)


@functools.cache
def _parts_of(path: str) -> Callable[[str], str] | None:
    """The module's ``worker_group``, if it declares one (read from the module itself: the controller collects
    nothing)."""
    try:
        if "\ndef worker_group(" not in (ROOT / path).read_text(encoding="utf-8"):
            return None
    except OSError:
        return None
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    parts: Callable[[str], str] = module.worker_group
    return parts


def group_of(nodeid: str) -> str:
    """The worker group of the test ``nodeid``: its file's (:func:`_file_group`), or the part of its file the module's
    ``worker_group`` names (:data:`SATURATING`: the one across modules)."""
    path, _, test = nodeid.partition("::")
    group = _file_group(path)
    parts = _parts_of(path) if group == path and test else None
    if parts is None:
        return group
    part = parts(test)
    return part if part == SATURATING else f"{path}::{part}"


def _node_id(classname: str, name: str) -> str | None:
    parts = classname.split(".")  # the module's dotted path, then any class names
    for end in range(len(parts), 0, -1):
        path = "/".join(parts[:end]) + ".py"
        if (ROOT / path).is_file():
            return "::".join([path, *parts[end:], name])
    return None


def _junit_times(path: Path) -> dict[str, float]:
    """Seconds per test in the JUnit report at ``path`` (empty when there is none)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return {}
    times: dict[str, float] = {}
    for case in root.iter("testcase"):
        nodeid = _node_id(case.get("classname", ""), case.get("name", ""))
        if nodeid is not None:
            times[nodeid] = float(case.get("time") or 0)
    return times


def _last_times() -> dict[str, float]:
    """Seconds per test: the last run's on this clone (:data:`TIMINGS`), else the committed ones (:data:`DURATIONS`)."""
    times = _junit_times(TIMINGS)
    if times:
        return times
    try:
        committed = json.loads(DURATIONS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in committed.items()} if isinstance(committed, dict) else {}


def write_durations() -> None:
    """Write :data:`DURATIONS` from the last run's report (``make durations``)."""
    times = _junit_times(TIMINGS)
    if not times:
        raise SystemExit(f"no test times in {TIMINGS}: run `make test` first")
    DURATIONS.write_text(json.dumps({k: round(v, 1) for k, v in sorted(times.items())}, indent=0) + "\n")


def _directory_rank(path: str) -> int:
    parts = path.split("/")
    folder = parts[1] if len(parts) > 2 else ""
    return DIRECTORY_ORDER.index(folder) if folder in DIRECTORY_ORDER else len(DIRECTORY_ORDER)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the markers set here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups: dict[str, list[pytest.Item]] = defaultdict(list)
    for item in items:
        if needs_server(item):
            item.add_marker(pytest.mark.server)
        group = group_of(item.nodeid)
        item.add_marker(pytest.mark.xdist_group(group))
        groups[group].append(item)
    times = _last_times()

    def order(group: str) -> tuple[bool, bool, float, int]:
        members = groups[group]
        saturates = any(item.get_closest_marker("saturates") for item in members)
        server = any(item.get_closest_marker("server") for item in members)
        known = sum(times.get(item.nodeid, 0.0) for item in members)
        rank = min(_directory_rank(item.nodeid.partition("::")[0]) for item in members)
        return (not saturates, server, -known, rank)

    ordered = sorted(groups, key=order)  # stable: the collection order among equals
    items[:] = [item for group in ordered for item in groups[group]]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` by :func:`group_of`: xdist's own cannot group under pytest 9 (it renames
    ``item._nodeid``, which pytest 9 no longer reads), so the groups are scheduled here, as scopes of xdist's
    ``loadscope`` (kept in collection order with ``--no-loadscope-reorder``)."""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """xdist's ``loadscope`` by :func:`group_of`, its workers beyond :data:`SATURATED_WORKERS` held back while
        the :data:`SATURATING` group runs."""

        def __init__(self, config: pytest.Config, log: Any) -> None:
            super().__init__(config, log)
            self._saturating: set[str] | None = None  # its tests not yet done (None: not scheduled yet)

        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

        def schedule(self) -> None:
            if self._saturating is None and self.collection_is_completed:
                collection = next(iter(self.registered_collections.values()), [])
                self._saturating = {nodeid for nodeid in collection if group_of(nodeid) == SATURATING}
            super().schedule()

        def _assign_work_unit(self, node: Any) -> None:
            if self._saturating and self.nodes.index(node) >= SATURATED_WORKERS:
                return  # held: handed work once the saturating group is done
            super()._assign_work_unit(node)

        def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
            self._done(self.registered_collections[node][item_index])
            super().mark_test_complete(node, item_index, duration)

        def remove_node(self, node: Any) -> str | None:
            crashed: str | None = super().remove_node(node)
            if crashed is not None:  # reported by xdist as failed, never completed
                self._done(crashed)
            return crashed

        def _done(self, nodeid: str) -> None:
            if not self._saturating:
                return
            self._saturating.discard(nodeid)
            if not self._saturating:
                for waiting in self.nodes[SATURATED_WORKERS:]:
                    self._reschedule(waiting)

    return GroupScheduling(config, log)


# -- the check: a test that starts a server without the marker ------------------------------------------------------

_current: list[pytest.Item] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    _current.append(item)
    try:
        return (yield)
    finally:
        _current.pop()


def _checked(start: Callable[..., Any]) -> Callable[..., Any]:
    def start_checked(self: prometheus_server.ServerProcess, *args: Any, **kwargs: Any) -> Any:
        item = _current[-1] if _current else None
        main = threading.current_thread() is threading.main_thread()  # the warm pool builds in its own threads
        if item is not None and main and item.get_closest_marker("server") is None:
            raise RuntimeError(
                f"{item.nodeid} starts {self.name} but is not marked `server` (the quick tier, `make check`, would "
                f"run it): extend the rules of {__name__} so they see why it needs one"
            )
        return start(self, *args, **kwargs)

    return start_checked


def pytest_configure(config: pytest.Config) -> None:
    server_process = prometheus_server.ServerProcess
    if not getattr(server_process.start, "_tier_checked", False):
        checked = _checked(server_process.start)
        checked._tier_checked = True  # type: ignore[attr-defined]
        server_process.start = checked  # type: ignore[method-assign]


# -- the check: collection imports nothing heavy ----------------------------------------------------------------------

_before_collection: set[str] = set()


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> None:
    _before_collection.update(name for name in HEAVY_MODULES if name in sys.modules)


def pytest_collection_finish(session: pytest.Session) -> None:
    imported = [name for name in HEAVY_MODULES if name in sys.modules and name not in _before_collection]
    if imported:
        culprits = sorted(
            str(module.__file__)
            for module in list(sys.modules.values())
            if (module.__name__.startswith("tests.") or module.__name__.startswith("test_"))
            and any(isinstance(value, types.ModuleType) and value.__name__.partition(".")[0] in imported
                    for value in vars(module).values())
        )  # fmt: skip
        raise pytest.UsageError(
            f"collecting the tests imported {', '.join(imported)}, which every worker then pays for: import "
            f"{'it' if len(imported) == 1 else 'them'} in the tests that use {'it' if len(imported) == 1 else 'them'} "
            f"(tests/helpers/imported_when_used.py); module-level names of: {', '.join(culprits) or 'none found'}"
        )
