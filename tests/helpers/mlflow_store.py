"""A new MLflow tracking store on SQLite, as MLflow leaves one it has just created, without creating it each time.

MLflow creates a SQLite store by running its schema migrations, about 2 s of CPU a store (a dozen of them in a run of
the suite). :func:`new_store` copies a store MLflow created once for this clone (in pytest's cache, kept for each
MLflow version, shared by the parallel workers), so a test's store is MLflow's own at its current schema, empty, as
the first tracker write finds a store created a moment before. Tests whose subject is what opens or creates a store
(that nothing does before a run starts) keep a path of their own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import pytest

__all__ = ["new_store"]

_CREATE = "import sys; from mlflow.tracking import MlflowClient; MlflowClient(sys.argv[1]).search_experiments()"


def _template(config: pytest.Config) -> Path:
    """The store MLflow created, in pytest's cache (created here, in a process of its own, when missing)."""
    cache = getattr(config, "cache", None)  # none with -p no:cacheprovider: then the system's temporary directory
    home = cache.mkdir("mlflow-store") if cache is not None else Path(tempfile.gettempdir())
    template = home / f"mlflow-{version('mlflow')}.db"
    if not template.exists():
        with tempfile.TemporaryDirectory(dir=home) as scratch:
            made = Path(scratch) / "mlflow.db"
            done = subprocess.run(
                [sys.executable, "-c", _CREATE, f"sqlite:///{made}"],
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert done.returncode == 0, f"MLflow could not create a store: {done.stderr[-2000:]}"
            os.replace(made, template)  # whole or not at all, whichever worker made it first
    return template


def new_store(config: pytest.Config, path: Path) -> str:
    """An empty MLflow store at ``path`` (a new file); its tracking URI."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_template(config), path)
    return f"sqlite:///{path}"
