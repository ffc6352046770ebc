"""Issue 36: one install line everywhere, the README's, which works from a fresh clone: ``pip install
'./otel-bridge[EXTRAS]'`` (the clone's path, the extras in brackets); the command line's hints name this clone's
path, never ``otel-bridge[...]`` as if it came from a package index."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from otel_bridge.errors import install_hint

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md"), REPO / "examples" / "README.md"])
INSTALL = re.compile(r"pip install (?:-e )?'([^']*otel-bridge[^']*)'")


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_install_line_is_the_readmes(document: Path) -> None:
    for target in INSTALL.findall(document.read_text(encoding="utf-8")):
        assert re.fullmatch(r"\./otel-bridge\[[a-z,]+\]", target), f"{document.name}: pip install '{target}'"


def test_the_readme_installs_from_the_clone() -> None:
    assert "pip install './otel-bridge[tensorboard,wandb]'" in (REPO / "README.md").read_text(encoding="utf-8")


def test_the_command_lines_hint_installs_from_this_clone() -> None:
    assert install_hint("wandb") == f"pip install '{REPO}[wandb]'"
    assert (REPO / "pyproject.toml").is_file()  # the path pip installs from: the clone itself
