"""The suite's own rules (tests/plugins/): fixed sleeps are accounted and bounded per test, a test that starts a
server is marked ``server`` (left out of ``make check``) by rule, or fails, a test saturating the machine runs
beside no other worker's test, collecting the tests imports nothing heavy, and one make target installs the Debian
packages."""

from __future__ import annotations

import json
import re
import sys
import types

import pytest

from tests.conftest import Replica
from tests.helpers.mlflow_store import new_store
from tests.plugins import machine, sleeps, tiers, timeline

pytest_plugins = ["pytester"]

SLEEPY = """
import time

import pytest

{mark}

def test_sleeps_twice():
    time.sleep(0.1)
    time.sleep(0.1)


def test_polls():
    for _ in range(5):
        time.sleep(0.04)
"""


@pytest.fixture
def small_budget(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """The sleep accounting of this process, scaled down (budget 0.15 s, polls up to 0.05 s) and counting the
    sleeps of the files ``pytester`` writes."""
    monkeypatch.setattr(sleeps, "TESTS", str(pytester.path))
    monkeypatch.setattr(sleeps, "BUDGET_S", 0.15)
    monkeypatch.setattr(sleeps, "POLL_S", 0.05)
    pytester.makeconftest('pytest_plugins = ["tests.plugins.sleeps"]')
    return pytester


def test_a_test_sleeping_past_its_budget_fails_naming_where(small_budget: pytest.Pytester) -> None:
    small_budget.makepyfile(test_sleepy=SLEEPY.format(mark=""))
    result = small_budget.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)  # the polls are not counted
    result.stdout.fnmatch_lines(["*test_sleeps_twice slept 0.2 s on fixed intervals (at most 0.15 s here: *"])


def test_a_module_may_declare_what_its_behaviour_needs(small_budget: pytest.Pytester) -> None:
    mark = 'pytestmark = pytest.mark.sleeps(0.5, reason="two steps of 0.1 s")'
    small_budget.makepyfile(test_sleepy=SLEEPY.format(mark=mark))
    small_budget.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_a_declaration_needs_its_reason(small_budget: pytest.Pytester) -> None:
    small_budget.makepyfile(test_sleepy=SLEEPY.format(mark="pytestmark = pytest.mark.sleeps(0.5)"))
    result = small_budget.runpytest_inprocess("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*pytest.mark.sleeps(seconds, reason=*"])
    assert result.ret != 0


def _item(module: types.ModuleType, *fixtures: str) -> pytest.Item:
    return types.SimpleNamespace(module=module, fixturenames=list(fixtures))  # type: ignore[return-value]


def test_a_module_holding_a_server_helper_needs_a_server() -> None:
    # imported here: held at this module's top, they would make it a module that needs a server
    from tests.helpers.prometheus_server import PrometheusServer

    holding = types.ModuleType("tests.integration.test_holding")
    holding.PrometheusServer = PrometheusServer  # type: ignore[attr-defined]
    simulated = types.ModuleType("tests.unit.test_simulated")
    simulated.Replica = Replica  # type: ignore[attr-defined]
    assert tiers.needs_server(_item(holding))
    assert not tiers.needs_server(_item(simulated))
    assert tiers.needs_server(_item(simulated, "prometheus"))  # a fixture that starts one
    deploy = types.ModuleType("tests.deploy.test_promtool")
    deploy.support = __import__("tests.deploy.support", fromlist=["_"])  # runs promtool: one level down
    assert tiers.needs_server(_item(deploy))
    # a helper that only keeps files in the machine's cache, beside the peers, starts nothing: the modules holding it
    # stay in the quick tier
    tracker = types.ModuleType("tests.unit.test_tracker_store")
    tracker.new_store = new_store  # type: ignore[attr-defined]
    assert not tiers.needs_server(_item(tracker))


def test_a_test_that_starts_a_server_unseen_by_the_rules_fails(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('pytest_plugins = ["tests.plugins.tiers"]')
    pytester.makepyfile(
        test_hidden="""
import importlib


def test_starts_prometheus(tmp_path):
    helper = importlib.import_module("tests.helpers.prometheus_server")
    helper.PrometheusServer(tmp_path).start()
"""
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_starts_prometheus starts prometheus but is not marked `server`*"])


HOLDING = """
import json
import os
import time

import pytest

from tests.plugins.machine import whole_machine

LOG = {log!r}


def note(what):
    with open(LOG, "a") as log:
        log.write(json.dumps([what, os.environ.get("PYTEST_XDIST_WORKER"), time.monotonic()]) + "\\n")


@pytest.mark.server
@pytest.mark.saturates
def test_holds():
    with whole_machine():
        note("hold")
        time.sleep(0.6)
        note("release")


{others_marks}
@pytest.mark.parametrize("n", range(12))
def test_other(n):
    note(f"begin {{n}}")
    time.sleep(0.1)
    note(f"end {{n}}")
"""


def others_beside_a_hold(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, others_marks: str) -> list[str]:
    """Two workers run a test holding the whole machine and twelve others (with ``others_marks``): the others that
    ran, even in part, while it held the machine (``test_other[n] (worker)``)."""
    monkeypatch.setenv("PYTHONPATH", str(tiers.ROOT))
    monkeypatch.delenv(machine.LOCKS_ENV, raising=False)  # the inner run's own locks, not this run's
    log = pytester.path / "log.jsonl"
    pytester.makeconftest('pytest_plugins = ["tests.plugins.machine", "tests.plugins.timeline"]')
    module = HOLDING.format(log=str(log), others_marks=others_marks)
    pytester.makepyfile(test_holding=module)
    report = pytester.path / "junit.xml"
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "2", "--dist", "load", f"--junitxml={report}"
    )
    result.assert_outcomes(passed=13)
    ran = timeline.spans(report)  # the report's timeline: every test, its worker, its start
    assert sorted({span.worker for span in ran}) == ["gw0", "gw1"], ran
    assert len(ran) == 13, ran
    notes = [json.loads(line) for line in log.read_text().splitlines()]
    held, released = [t for what, _, t in notes if what in ("hold", "release")]
    others = {what.split()[1]: w for what, w, _ in notes if what.startswith("begin")}
    assert set(others.values()) == {"gw0", "gw1"}, "both workers ran tests (else nothing was shown)"
    beside = []
    for n, worker in sorted(others.items()):
        begin = next(t for what, _, t in notes if what == f"begin {n}")
        end = next(t for what, _, t in notes if what == f"end {n}")
        if not (end < held or begin > released):
            beside.append(f"test_other[{n}] ({worker})")
    return beside


def test_a_test_holding_the_whole_machine_runs_beside_no_other_workers_server_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers: while one holds the machine (as a ``CPULoad`` does), the other starts no server test and none of
    its server tests is running."""
    assert others_beside_a_hold(pytester, monkeypatch, "@pytest.mark.server") == []


UNDECLARED = """
from tests.plugins.machine import whole_machine


def test_saturates_unmarked():
    with whole_machine():
        pass
"""


def test_a_test_saturating_the_machine_unmarked_fails(pytester: pytest.Pytester) -> None:
    """Saturating tests are handed out first (tiers.py) by their marker: one without it fails, naming the rule."""
    pytester.makeconftest('pytest_plugins = ["tests.plugins.machine"]')
    pytester.makepyfile(test_undeclared=UNDECLARED)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_saturates_unmarked saturates the machine but is not marked `saturates`*"])


def test_a_test_module_importing_a_heavy_module_at_collection_fails_naming_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every worker collects every module: a module-level ``import torch`` costs each of them the import."""
    monkeypatch.setattr(tiers, "HEAVY_MODULES", ("otel_bridge_heavy_stand_in",))
    monkeypatch.delitem(sys.modules, "otel_bridge_heavy_stand_in", raising=False)  # and gone again afterwards
    pytester.syspathinsert()
    pytester.makeconftest('pytest_plugins = ["tests.plugins.tiers"]')
    pytester.makepyfile(
        otel_bridge_heavy_stand_in="X = 1",
        test_light="def test_light():\n    pass\n",
        test_heavy="import otel_bridge_heavy_stand_in\n\n\ndef test_heavy():\n    pass\n",
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "test_light.py")
    result.assert_outcomes(passed=1)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*collecting the tests imported otel_bridge_heavy_stand_in*test_heavy.py*"])


class Worker:
    """What xdist's scheduler sees of a worker: the tests it was sent (indices into the collection)."""

    def __init__(self, name: str) -> None:
        self.gateway = types.SimpleNamespace(id=name)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def test_workers_beyond_the_saturated_ones_wait_for_the_saturating_group(pytester: pytest.Pytester) -> None:
    """With four workers (``make test``'s), three take work while the saturating tests run (one of
    them and two running the quick tier beside it): the fourth is sent nothing until every saturating test is done,
    then takes the waiting groups."""
    workers = 4
    config = pytester.parseconfig("--tx", f"{workers}*popen", "--dist", "loadgroup", "--no-loadscope-reorder")
    scheduler = tiers.pytest_xdist_make_scheduler(config, None)
    saturating = ["tests/integration/test_node_agents.py::test_one", "tests/integration/test_node_agents.py::test_two"]
    others = [f"tests/unit/test_stand_in_{n}.py::test_it" for n in range(8)]
    collection = saturating + others
    assert {tiers.group_of(nodeid) for nodeid in saturating} == {tiers.SATURATING}
    nodes = [Worker(f"gw{n}") for n in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
    for node in nodes:
        scheduler.add_node_collection(node, collection)
    scheduler.schedule()
    running, held = nodes[: tiers.SATURATED_WORKERS], nodes[tiers.SATURATED_WORKERS :]
    (holder,) = (node for node in running if node.sent[:2] == [0, 1])  # the saturating group is handed out first
    assert all(node.sent for node in running)
    assert [node.sent for node in held] == [[]]
    scheduler.mark_test_complete(holder, 0)
    assert [node.sent for node in held] == [[]]
    scheduler.mark_test_complete(holder, 1)
    assert all(node.sent for node in held)
    assert sorted(i for node in nodes for i in node.sent) == sorted(set(i for node in nodes for i in node.sent))


def test_modules_declaring_one_worker_group_run_in_one_worker() -> None:
    """The modules importing verl and torch into the test process share one group, so one worker imports them once;
    a module declaring none is a group of its own."""
    verl = {
        tiers.group_of(f"tests/integration/{module}.py::test_it")
        for module in ("test_verl_phases", "test_integrations")
    }
    assert verl == {tiers.WORKER_GROUP_PREFIX + "verl"}
    assert tiers.group_of("tests/unit/test_window.py::test_it") == "tests/unit/test_window.py"


def test_no_two_test_modules_share_a_name() -> None:
    """The test folders are not packages (pytest imports each module by its base name): a second module of one name
    is not collected at all, only an error is (tests/unit/test_prometheus_names.py beside an integration module of
    that name did it once)."""
    modules: dict[str, list[str]] = {}
    for path in sorted((tiers.ROOT / "tests").rglob("test_*.py")):
        modules.setdefault(path.name, []).append(str(path.relative_to(tiers.ROOT)))
    assert not {name: paths for name, paths in modules.items() if len(paths) > 1}


def make_recipes(makefile: str) -> dict[str, str]:
    """Each target of ``makefile`` (its text) with its recipe, the variables it names expanded one level."""
    variables = dict(re.findall(r"^([A-Z_]+) *[:?]?= *(.*)$", makefile, flags=re.MULTILINE))
    recipes: dict[str, str] = {}
    target = None
    for line in makefile.splitlines():
        if line.startswith("\t") and target is not None:
            recipes[target] += re.sub(r"\$\(([A-Z_]+)\)", lambda m: variables.get(m[1], m[0]), line) + "\n"
        elif (defined := re.match(r"^([^\s:=#][^:=]*):(?!=)", line)) is not None:
            target = defined[1]
            recipes.setdefault(target, "")
        elif not line.startswith("\t"):
            target = None
    return recipes


def test_one_make_target_installs_debian_packages() -> None:
    """``make`` runs two jobs, and two ``apt-get`` at once fail on dpkg's lock: on a new machine faketime's install
    failed beside Prometheus', and the clock-offset tests skipped."""
    recipes = make_recipes((tiers.ROOT / "Makefile").read_text(encoding="utf-8"))
    assert "apt-get" in recipes["debian-packages"]
    assert [target for target, recipe in recipes.items() if "apt-get" in recipe] == ["debian-packages"]
