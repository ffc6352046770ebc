"""The package's structure (issue 13 acceptance): ``python -m tests.check_imports`` passes on otel_bridge, and fails,
naming the problem, on a package with an import cycle, an upward import or a module in no layer. (The old cap on a
module's lines is retired: a module holds one idea, whatever its length.)
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.check_imports", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_otel_bridge_has_no_cycle_and_no_upward_import() -> None:
    result = _check()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no cycle, no upward import" in result.stdout


def test_the_check_names_each_kind_of_problem(tmp_path: Path) -> None:
    package = tmp_path / "otel_bridge"
    package.mkdir()
    files = {
        "__init__.py": "from otel_bridge.bridge import Bridge\n",
        "bridge.py": "class Bridge: ...\n",
        # window (model layer) imports reader (pipeline layer) inside a function: still an upward import, and with
        # reader importing window, a cycle
        "window.py": "def f():\n    from otel_bridge import reader\n    return reader\n",
        "reader.py": "from . import window\n",
        "errors.py": "X = 1\n",
        "stray.py": "import otel_bridge.errors\n",
    }
    for name, text in files.items():
        (package / name).write_text(textwrap.dedent(text))
    result = _check("--source", str(tmp_path))
    assert result.returncode == 1, result.stdout
    lines = result.stdout.splitlines()
    assert any(
        line.startswith("otel_bridge.window (layer 'model') imports otel_bridge.reader (layer 'pipeline', higher)")
        for line in lines
    ), lines
    assert any(line.startswith("import cycle among otel_bridge.reader, otel_bridge.window") for line in lines), lines
    assert any(line.startswith("otel_bridge.stray: in no layer") for line in lines), lines
    assert not any("otel_bridge.bridge" in line for line in lines), lines  # the public API may import any layer
