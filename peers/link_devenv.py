"""Lets a clone's virtual environment use the shared dev environment (``peers/build.sh devenv``).

Usage: .venv/bin/python peers/link_devenv.py DEVENV

Run with the clone's own interpreter (``make test`` does, before installing otel-bridge itself into it). It writes
``otel_bridge_devenv.pth`` into the clone's site-packages, which adds DEVENV's site-packages after the clone's own
(``site.addsitedir``: its ``.pth`` files are read too), so the clone imports the dev extra's dependencies from there,
compiled once per machine. The dependencies' console scripts (pytest, mypy, lint-imports, tensorboard,
opentelemetry-instrument, ...) are written into the clone's ``bin/`` with the clone's interpreter in their ``#!``
line (DEVENV's name the folder it was built in, and their interpreter would not see the clone's otel-bridge);
DEVENV's executables that are not Python scripts (ruff, uv) are linked. What the clone's ``bin/`` already has of its
own (python, activate; pip when the venv was made with it) is left as it is; what an earlier link wrote is replaced.
A venv made without pip (``make test``'s) gets DEVENV's pip scripts, run by the clone's interpreter: they install
into the clone's venv.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

PTH = "otel_bridge_devenv.pth"
#: The second line of every script this writes: how a later link knows it may replace it.
MARK = "# written by otel-bridge's peers/link_devenv.py\n"
#: The venv's own files, never taken from DEVENV.
OWN = ("python", "pip", "activate", "Activate", "deactivate")


def site_packages(venv: Path) -> Path:
    """``venv``'s site-packages (the layout of a POSIX venv of this interpreter's version)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    found = venv / "lib" / version / "site-packages"
    if not found.is_dir():
        raise SystemExit(f"link_devenv: {found} is missing: {venv} is not a venv of {version} (rebuild it: make test)")
    return found


def link(devenv: Path) -> None:
    """Make this interpreter's venv see ``devenv`` (see the module docstring)."""
    shared = site_packages(devenv / "venv")
    own_site = Path(sysconfig.get_paths()["purelib"])
    (own_site / PTH).write_text(f"import site; site.addsitedir({str(shared)!r})\n", encoding="utf-8")
    own_bin = Path(sys.executable).parent
    for script in sorted((devenv / "venv" / "bin").iterdir()):
        target = own_bin / script.name
        if (script.name.startswith(OWN) and target.exists()) or not script.is_file():
            continue
        if target.exists() or target.is_symlink():
            ours = target.is_symlink() or MARK in target.read_text(encoding="utf-8", errors="replace")[:400]
            if not ours:
                continue
            target.unlink()
        head = script.read_bytes()[:2]
        if head == b"#!":
            body = script.read_text(encoding="utf-8").partition("\n")[2]
            target.write_text(f"#!{sys.executable}\n{MARK}{body}", encoding="utf-8")
            target.chmod(0o755)
        elif os.access(script, os.X_OK):
            target.symlink_to(script)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: .venv/bin/python peers/link_devenv.py DEVENV")
    link(Path(sys.argv[1]))
