"""The house's layers (issue 25): ``lint-imports`` keeps every import contract of pyproject.toml on otel_bridge, and it
breaks them, naming the import, when a module imports from a floor above its own. The violating import here is the
configuration (the bottom of the house) importing the facade inside a function: a lazy import is still a dependency.
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


def test_an_import_from_a_higher_floor_breaks_the_layers(tmp_path: Path) -> None:
    copy = tmp_path / "otel_bridge"
    shutil.copytree(ROOT / "otel_bridge", copy, ignore=shutil.ignore_patterns("__pycache__"))
    with (copy / "config" / "model.py").open("a", encoding="utf-8") as model:
        model.write("\n\ndef _facade() -> object:\n    from otel_bridge.bridge import Bridge\n\n    return Bridge\n")
    result = lint_imports(tmp_path, pythonpath=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("Layers:") and line.endswith("BROKEN") for line in lines), result.stdout
    assert "otel_bridge.config is not allowed to import otel_bridge.bridge:" in lines, result.stdout
    # the copy was analysed (this checkout has no such import), and the report names the import that breaks the layers
    assert any("otel_bridge.config.model -> otel_bridge.bridge" in line for line in lines), result.stdout
