"""A new MLflow tracking store on SQLite, as MLflow leaves one it has just created, without creating it each time.

MLflow creates a SQLite store by running its schema migrations, about 2 s of CPU a store (a dozen of them in a run of
the suite; 4 s in the process that creates the first). :func:`new_store` copies a store MLflow created once on this
machine (kept for each MLflow version beside the peers, ``$XDG_CACHE_HOME/otel-bridge/mlflow-store``, else
``~/.cache/...``, shared by the parallel workers and every clone), so a test's store is MLflow's own at its current
schema, empty, as the first tracker write finds a store created a moment before. Tests whose subject is what opens or
creates a store (that nothing does before a run starts) keep a path of their own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

from tests.helpers.machine_cache import machine_cache

__all__ = ["new_store"]

_CREATE = "import sys; from mlflow.tracking import MlflowClient; MlflowClient(sys.argv[1]).search_experiments()"


def _template() -> Path:
    """The store MLflow created, in the machine's cache (created here, in a process of its own, when missing)."""
    home = machine_cache() / "mlflow-store"
    home.mkdir(parents=True, exist_ok=True)
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
            os.replace(made, template)  # whole or not at all, whichever worker (or clone) made it first
    return template


def new_store(path: Path) -> str:
    """An empty MLflow store at ``path`` (a new file); its tracking URI."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_template(), path)
    return f"sqlite:///{path}"
