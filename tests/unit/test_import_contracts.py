"""The house's layers (issue 25): ``lint-imports`` keeps every import contract of pyproject.toml on otel_bridge, and it
breaks them, naming the import, when a module imports from a floor above its own. The violating import here is the
configuration (the bottom of the house) importing the facade inside a function: a lazy import is still a dependency.
The other contracts break the same way: a run's module or the public API importing tools/, and an import cycle between
two modules of one package.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")  # import-linter, a dev dependency


def lint_imports(cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with the contracts of this repository's pyproject.toml, on the otel_bridge importable from
    ``pythonpath`` (default: this checkout's)."""
    assert LINT_IMPORTS.exists(), f"{LINT_IMPORTS} is missing: pip install -e '.[dev]'"
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(ROOT / "pyproject.toml")],
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
    tmp_path: Path, module: str, lazy_import: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """``lint-imports`` on a copy of otel_bridge whose ``module`` (a path under otel_bridge/) ends with a function doing
    ``lazy_import``; the result and its lines."""
    copy = tmp_path / "otel_bridge"
    shutil.copytree(ROOT / "otel_bridge", copy, ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / module).open("a", encoding="utf-8") as source:
        source.write(f"\n\ndef _lazy() -> object:\n    {lazy_import}\n\n    return None\n")
    result = lint_imports(tmp_path, pythonpath=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    return result, result.stdout.splitlines()


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
