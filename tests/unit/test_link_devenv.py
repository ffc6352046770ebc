"""peers/link_devenv.py: a clone's venv sees the shared dev environment's packages and runs its scripts with its own
interpreter (docs/peers.md, the dev environment)."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"


def shared_env(root: Path) -> Path:
    """A dev environment as peers/build.sh leaves it: a package, a console script naming the interpreter of the
    folder it was built in, and a compiled executable."""
    site = root / "venv" / "lib" / VERSION / "site-packages"
    site.mkdir(parents=True)
    (site / "shared_only.py").write_text("WHERE = 'shared'\n", encoding="utf-8")
    (site / "shared_extra.pth").write_text("import shared_only; shared_only.PTH_READ = True\n", encoding="utf-8")
    bin_dir = root / "venv" / "bin"
    bin_dir.mkdir()
    (bin_dir / "shared-tool").write_text(
        "#!/somewhere/.devenv-abc123.tmp/venv/bin/python\n"
        "import sys, shared_only\nprint(sys.executable, shared_only.WHERE)\n",
        encoding="utf-8",
    )
    (bin_dir / "shared-tool").chmod(0o755)
    (bin_dir / "native").write_bytes(b"\x7fELF not really\n")
    (bin_dir / "native").chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    return root


def test_a_linked_clone_imports_the_shared_packages_and_runs_their_scripts_with_its_interpreter(tmp_path: Path) -> None:
    devenv = shared_env(tmp_path / "devenv-0123")
    clone = tmp_path / "clone"
    venv.create(clone, with_pip=False)
    python = clone / "bin" / "python"
    (clone / "bin" / "native").write_text("the clone's own\n", encoding="utf-8")  # not written by a link: kept
    for _ in range(2):  # linking again replaces what the first link wrote
        subprocess.run([str(python), str(ROOT / "peers" / "link_devenv.py"), str(devenv)], check=True, timeout=60)
    imported = subprocess.run(
        [str(python), "-c", "import shared_only; print(shared_only.WHERE, getattr(shared_only, 'PTH_READ', False))"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert imported.stdout.split() == ["shared", "True"]  # the shared site-packages and its own .pth files
    ran = subprocess.run([str(clone / "bin" / "shared-tool")], capture_output=True, text=True, check=True, timeout=60)
    assert ran.stdout.split() == [str(python), "shared"]
    assert (clone / "bin" / "native").read_text(encoding="utf-8") == "the clone's own\n"


def test_the_shared_executables_that_are_not_scripts_are_linked(tmp_path: Path) -> None:
    devenv = shared_env(tmp_path / "devenv-0123")
    clone = tmp_path / "clone"
    venv.create(clone, with_pip=False)
    subprocess.run(
        [str(clone / "bin" / "python"), str(ROOT / "peers" / "link_devenv.py"), str(devenv)], check=True, timeout=60
    )
    assert (clone / "bin" / "native").resolve() == (devenv / "venv" / "bin" / "native").resolve()
