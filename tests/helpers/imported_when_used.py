"""A heavy optional module (torch, wandb, mlflow, ...) that a test module names at its top but imports only when a
test uses it.

``pytest -n N`` collects every test module in every worker: a module-level ``pytest.importorskip("torch")`` costs each
worker the import (torch, wandb and mlflow together: about 4 CPU-s), though one worker runs the module's tests.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import pytest


class ImportedWhenUsed:
    """``name``, imported at the first read of a public attribute; the test reading it is skipped when it is not
    installed (as ``pytest.importorskip`` does for a whole module). Private and dunder names are not the module's:
    pytest's collection asks every module-level object for some (``__test__``, ``_pytestfixturefunction``, ...)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: Any = None

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("_"):
            raise AttributeError(attribute)
        if self._module is None:
            try:
                self._module = importlib.import_module(self._name)
            except ImportError:
                pytest.skip(f"could not import {self._name!r}")
        return getattr(self._module, attribute)

    def __repr__(self) -> str:
        return f"ImportedWhenUsed({self._name!r})"


def skip_unless_installed(*names: str) -> None:
    """Skip the calling test unless every module of ``names`` is installed, without importing one: for a test whose
    scripts import them in processes of their own (``pytest.importorskip`` would import each here too)."""
    missing = [name for name in names if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")
