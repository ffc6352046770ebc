"""The house's layers (issue 25): ``lint-imports`` keeps every import contract of pyproject.toml on otel_bridge, and it
breaks them, naming the import, when a module imports from a floor above its own. The violating import here is the
configuration (the bottom of the house) importing the facade inside a function: a lazy import is still a dependency.
The other contracts break the same way: a run's module or the public API importing tools/, an import cycle between
two modules of one package, and (issue 33) the command line, the tools or a benchmark importing a module inside a
package instead of the package's face (tests/import_faces.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")  # import-linter, a dev dependency


def lint_imports(
    cwd: Path, pythonpath: Path | None = None, config: Path = ROOT / "pyproject.toml"
) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with the contracts of ``config`` (this repository's pyproject.toml), on the otel_bridge and
    bench importable from ``pythonpath`` (default: this checkout's); the faces contract's own module comes from this
    checkout."""
    assert LINT_IMPORTS.exists(), f"{LINT_IMPORTS} is missing: pip install -e '.[dev]'"
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = f"{pythonpath}{os.pathsep}{ROOT}"
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(config)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_otel_bridge_keeps_every_import_contract() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert ", 0 broken." in result.stdout, result.stdout


def lint_a_copy_with(
    tmp_path: Path, module: str, lazy_import: str, *, package: str = "otel_bridge"
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """``lint-imports`` on a copy of otel_bridge and bench whose ``module`` (a path under ``package``/) ends with a
    function doing ``lazy_import``; the result and its lines."""
    for copied in ("otel_bridge", "bench"):
        shutil.copytree(ROOT / copied, tmp_path / copied, ignore=shutil.ignore_patterns("__pycache__"))
    with (tmp_path / package / module).open("a", encoding="utf-8") as source:
        source.write(f"\n\ndef _lazy() -> object:\n    {lazy_import}\n\n    return None\n")
    result = lint_imports(tmp_path, pythonpath=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    return result, result.stdout.splitlines()


def flat(result: subprocess.CompletedProcess[str]) -> str:
    """The report's words joined by single spaces (lint-imports wraps its lines at the terminal's width)."""
    return " ".join(result.stdout.split())


def broken(lines: list[str], contract: str) -> bool:
    return any(line.startswith(contract) and line.endswith("BROKEN") for line in lines)


def test_an_import_from_a_higher_floor_breaks_the_layers(tmp_path: Path) -> None:
    result, lines = lint_a_copy_with(tmp_path, "config/model.py", "from otel_bridge.bridge import Bridge  # noqa")
    assert broken(lines, "Layers:"), result.stdout
    assert "otel_bridge.config is not allowed to import otel_bridge.bridge:" in lines, result.stdout
    # the copy was analysed (this checkout has no such import), and the report names the import that breaks the layers
    assert any("otel_bridge.config.model -> otel_bridge.bridge" in line for line in lines), result.stdout


def test_a_run_importing_tools_breaks_the_tools_contract(tmp_path: Path) -> None:
    result, lines = lint_a_copy_with(tmp_path, "pipeline/worker.py", "from otel_bridge.tools import demo  # noqa")
    assert broken(lines, "tools/ is imported by the command line only"), result.stdout
    assert "otel_bridge.pipeline is not allowed to import otel_bridge.tools:" in lines, result.stdout
    assert any("otel_bridge.pipeline.worker -> otel_bridge.tools" in line for line in lines), result.stdout


def test_the_public_api_importing_tools_breaks_the_root_contract(tmp_path: Path) -> None:
    result, lines = lint_a_copy_with(tmp_path, "__init__.py", "from otel_bridge.tools import demo  # noqa")
    assert broken(lines, "tools/ is not imported by the public API"), result.stdout
    assert not broken(lines, "tools/ is imported by the command line only"), result.stdout  # its sources miss the root
    assert "otel_bridge is not allowed to import otel_bridge.tools.demo:" in lines, result.stdout
    assert any(line.lstrip("- ").startswith("otel_bridge -> otel_bridge.tools.demo") for line in lines), result.stdout


def test_an_import_cycle_breaks_the_no_cycles_contract(tmp_path: Path) -> None:
    # producer.py imports _internal/; _internal/plan.py importing producer.py closes a cycle inside producers/promql/
    result, lines = lint_a_copy_with(
        tmp_path, "producers/promql/_internal/plan.py", "from otel_bridge.producers.promql import producer  # noqa"
    )
    assert broken(lines, "No import cycle"), result.stdout
    assert not broken(lines, "Layers:"), result.stdout
    assert not broken(lines, "Producers:"), result.stdout
    assert "No cycles are allowed in otel_bridge.producers.promql." in lines, result.stdout
    assert "- ._internal -> .producer (1 import)" in lines, result.stdout


def test_the_command_line_importing_a_module_inside_a_package_breaks_the_faces_contract(tmp_path: Path) -> None:
    result, lines = lint_a_copy_with(
        tmp_path, "cli/plot.py", "from otel_bridge.producers.statistics import compute_stats  # noqa"
    )
    assert broken(lines, "Faces:"), result.stdout
    assert not broken(lines, "Layers:"), result.stdout
    # the report names the importer, the line and the face to use instead (rich wraps long lines: read them joined)
    assert "otel_bridge.cli.plot:" in flat(result), result.stdout
    assert (
        "imports otel_bridge.producers.statistics: otel_bridge.producers.statistics is a module inside "
        "otel_bridge.producers: import compute_stats from that package's face" in flat(result)
    ), result.stdout


def test_a_benchmark_importing_a_name_its_face_does_not_export_breaks_the_faces_contract(tmp_path: Path) -> None:
    # bench/ is no package of the import graph: the contract reads its sources. TrackerKeys lives in
    # otel_bridge/exporters/naming.py; the exporters' face does not export it
    result, lines = lint_a_copy_with(
        tmp_path, "common.py", "from otel_bridge.exporters import TrackerKeys  # noqa", package="bench"
    )
    assert broken(lines, "Faces:"), result.stdout
    assert "bench.common:" in flat(result), result.stdout
    assert (
        "imports otel_bridge.exporters: TrackerKeys is not on the face of otel_bridge.exporters (its __all__)"
        in flat(result)
    ), result.stdout


def test_an_allowance_that_matches_no_import_breaks_the_faces_contract(tmp_path: Path) -> None:
    config = tmp_path / "pyproject.toml"
    original = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    stale = "otel_bridge.cli.plot -> otel_bridge.producers.statistics"
    assert "\nallowed = [\n" in original
    config.write_text(original.replace("\nallowed = [\n", f'\nallowed = [\n    "{stale}",\n', 1), encoding="utf-8")
    result = lint_imports(ROOT, config=config)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert broken(lines, "Faces:"), result.stdout
    assert f"the allowance '{stale}' matches no import any more: remove it from pyproject.toml" in flat(result)
