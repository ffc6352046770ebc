"""Tracker plugins: kinds declared by installed distributions in the ``otel_bridge.backends`` entry-point group.

Nothing is pip-installed: each test puts a distribution's ``.dist-info`` (METADATA + entry_points.txt) on
``sys.path``, where ``importlib.metadata`` finds it exactly as it finds an installed package.
"""

from __future__ import annotations

import csv
import sys
import textwrap
import tomllib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from otel_bridge.config import BridgeConfig
from otel_bridge.errors import BackendError, ConfigError
from otel_bridge.exporters.backends.base import Backend
from otel_bridge.exporters.backends.jsonl import JsonlBackend
from otel_bridge.exporters.backends.registry import (
    BACKENDS,
    ENTRY_POINT_GROUP,
    create_backend,
    plugin_entry_points,
)
from otel_bridge.exporters.record import StepRecord

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_backend"
EXAMPLE_MODULE = "otel_bridge_mytracker"
TEST_MODULE = "otel_bridge_test_plugins"
T0 = 1_700_000_000.25

TEST_PLUGINS = textwrap.dedent(
    '''
    """Plugin factories that misbehave in every way the registry must report."""

    from otel_bridge.errors import ConfigError

    CONSTANT = 42
    created = []


    def raising(options, run_dir):
        raise RuntimeError("the tracker server said no")


    def picky(options, run_dir):
        raise ConfigError("option 'url' is required")


    def not_a_backend(options, run_dir):
        return object()


    class Fine:
        def __init__(self, options, run_dir):
            self.name = "fine"
            self.options = dict(options)
            self.run_dir = run_dir
            created.append(self)

        def write(self, record):
            pass

        def flush(self):
            pass

        def close(self):
            pass
    '''
)

MakeDist = Callable[[str, Mapping[str, str]], Path]


@pytest.fixture
def make_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MakeDist]:
    """``make_dist(name, {kind: "module:attr"})`` puts a distribution declaring those kinds on sys.path.

    The example plugin's folder and a module of misbehaving factories are importable too. Modules the
    tests import are removed from sys.modules afterwards.
    """
    site = tmp_path / "site"
    site.mkdir()
    (site / f"{TEST_MODULE}.py").write_text(TEST_PLUGINS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(site))

    def make(name: str, entry_points: Mapping[str, str]) -> Path:
        dist_info = site / f"{name.replace('-', '_')}-0.1.0.dist-info"
        dist_info.mkdir()
        (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n", encoding="utf-8")
        lines = [f"[{ENTRY_POINT_GROUP}]"] + [f"{kind} = {target}" for kind, target in entry_points.items()]
        (dist_info / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        return dist_info

    try:
        yield make
    finally:
        for module in (EXAMPLE_MODULE, TEST_MODULE):
            sys.modules.pop(module, None)


def example_entry_points() -> dict[str, str]:
    """The entry points examples/custom_backend/pyproject.toml declares."""
    with (EXAMPLE / "pyproject.toml").open("rb") as file:
        project = tomllib.load(file)["project"]
    entry_points: dict[str, str] = project["entry-points"][ENTRY_POINT_GROUP]
    return entry_points


def records(count: int) -> list[StepRecord]:
    return [
        StepRecord(
            step=step,
            values={"actor/loss": 1.0 / step, "rollout/tokens": 512.0 * step},
            time=T0 + step,
            window_start=None,
        )
        for step in range(1, count + 1)
    ]


def test_the_example_plugin_is_found_loaded_lazily_and_writes(make_dist: MakeDist, tmp_path: Path) -> None:
    assert example_entry_points() == {"mytracker": "otel_bridge_mytracker:create"}
    make_dist("otel-bridge-mytracker", example_entry_points())
    assert "mytracker" in plugin_entry_points()
    assert EXAMPLE_MODULE not in sys.modules, "finding plugins imports nothing"

    run_dir = tmp_path / "run"
    backend = create_backend("mytracker", {"path": "out/m.csv"}, run_dir)
    assert EXAMPLE_MODULE in sys.modules
    assert isinstance(backend, Backend)
    assert backend.name == "mytracker"
    written = records(20)
    for record in written:
        backend.write(record)
    backend.flush()
    backend.close()
    backend.close()
    with (run_dir / "out" / "m.csv").open(newline="", encoding="utf-8") as file:
        rows = list(csv.reader(file))
    assert rows == [
        [str(record.step), key, str(value)] for record in written for key, value in sorted(record.values.items())
    ]
    with pytest.raises(BackendError, match="mytracker: cannot write step 1"):
        backend.write(written[0])


def test_the_example_plugins_own_option_errors_name_the_plugin(make_dist: MakeDist, tmp_path: Path) -> None:
    make_dist("otel-bridge-mytracker", example_entry_points())
    with pytest.raises(
        ConfigError,
        match=r"tracker 'mytracker' \(plugin 'mytracker' \(otel_bridge_mytracker:create from the distribution "
        r"'otel-bridge-mytracker'\)\): unknown option\(s\) \['colour'\]",
    ):
        create_backend("mytracker", {"colour": "red"}, tmp_path)


def test_options_and_run_dir_reach_the_factory(make_dist: MakeDist, tmp_path: Path) -> None:
    make_dist("fine-plugin", {"fine": f"{TEST_MODULE}:Fine"})
    backend = create_backend("fine", {"url": "http://127.0.0.1:1", "n": 3}, tmp_path / "run")
    assert backend.name == "fine"
    created = sys.modules[TEST_MODULE].created
    assert [(b.options, b.run_dir) for b in created] == [({"url": "http://127.0.0.1:1", "n": 3}, tmp_path / "run")]


def test_unknown_kind_lists_built_in_and_installed_plugin_kinds(make_dist: MakeDist, tmp_path: Path) -> None:
    make_dist("otel-bridge-mytracker", example_entry_points())
    make_dist("fine-plugin", {"fine": f"{TEST_MODULE}:Fine"})
    with pytest.raises(ConfigError) as caught:
        create_backend("mytrackr", {}, tmp_path)
    message = str(caught.value)
    assert f"the built-in trackers are: {', '.join(sorted(BACKENDS))};" in message
    assert "installed plugin trackers: fine, mytracker (" in message
    assert ENTRY_POINT_GROUP in message
    assert EXAMPLE_MODULE not in sys.modules, "listing plugins imports none of them"


def test_a_plugin_installed_after_a_lookup_is_found_by_the_next(make_dist: MakeDist, tmp_path: Path) -> None:
    """The installed plugins are kept between lookups (reading every distribution's metadata is slow in a large
    environment), and a distribution installed meanwhile, into a directory already on ``sys.path``, is still found."""
    make_dist("fine-plugin", {"fine": f"{TEST_MODULE}:Fine"})
    assert set(plugin_entry_points()) == {"fine"}
    assert BridgeConfig.from_dict({"trackers": [{"type": "fine"}]}).trackers[0].type == "fine"
    make_dist("otel-bridge-mytracker", example_entry_points())
    assert set(plugin_entry_points()) == {"fine", "mytracker"}
    assert BridgeConfig.from_dict({"trackers": [{"type": "mytracker"}]}).trackers[0].type == "mytracker"


def test_unknown_kind_without_plugins_says_none(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"unknown tracker 'nope'; the built-in trackers are: .*wandb; "
        r"installed plugin trackers: none",
    ):
        create_backend("nope", {}, tmp_path)


@pytest.mark.parametrize(
    ("target", "error", "message"),
    [
        (
            f"{TEST_MODULE}:raising",
            BackendError,
            r"tracker 'broken': plugin 'broken' \(otel_bridge_test_plugins:raising from the distribution "
            r"'broken-plugin'\) failed to create its backend: RuntimeError: the tracker server said no",
        ),
        (
            f"{TEST_MODULE}:picky",
            ConfigError,
            r"tracker 'broken' \(plugin 'broken' .*\): option 'url' is required",
        ),
        (
            f"{TEST_MODULE}:not_a_backend",
            BackendError,
            r"plugin 'broken' .* returned object, which is not a Backend",
        ),
        (
            f"{TEST_MODULE}:CONSTANT",
            BackendError,
            r"plugin 'broken' .* names 42, which is not callable",
        ),
        (
            "otel_bridge_no_such_module:create",
            BackendError,
            r"cannot load plugin 'broken' \(otel_bridge_no_such_module:create .*\): ModuleNotFoundError",
        ),
        (
            f"{TEST_MODULE}:missing_attribute",
            BackendError,
            r"cannot load plugin 'broken' .*: AttributeError",
        ),
    ],
)
def test_a_misbehaving_plugin_is_named_in_the_error(
    make_dist: MakeDist, tmp_path: Path, target: str, error: type[Exception], message: str
) -> None:
    make_dist("broken-plugin", {"broken": target})
    with pytest.raises(error, match=message):
        create_backend("broken", {}, tmp_path)


def test_a_kind_declared_by_two_plugins_is_a_config_error(make_dist: MakeDist, tmp_path: Path) -> None:
    make_dist("otel-bridge-mytracker", example_entry_points())
    make_dist("copycat", {"mytracker": f"{TEST_MODULE}:Fine"})
    with pytest.raises(ConfigError, match=r"'mytracker' is declared by several installed plugins: ") as caught:
        create_backend("mytracker", {}, tmp_path)
    assert "from the distribution 'copycat'" in str(caught.value)
    assert "from the distribution 'otel-bridge-mytracker'" in str(caught.value)
    assert "uninstall all but one" in str(caught.value)
    assert EXAMPLE_MODULE not in sys.modules


def test_built_in_kinds_win_over_plugins_of_the_same_name(make_dist: MakeDist, tmp_path: Path) -> None:
    make_dist("shadow", {"jsonl": f"{TEST_MODULE}:raising"})
    backend = create_backend("jsonl", {}, tmp_path)
    try:
        assert isinstance(backend, JsonlBackend)
    finally:
        backend.close()
    assert TEST_MODULE not in sys.modules
