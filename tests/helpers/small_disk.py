"""A real filesystem that fills up: a small tmpfs mounted for a test (or the soak), and a filler taking its free space.

Mounting needs root or ``CAP_SYS_ADMIN``; without them :func:`small_tmpfs` raises :class:`CannotMountError` with the
reason (tests skip with it, the soak reports it), never a fake disk::

    with small_tmpfs(tmp_path / "disk", "64k") as disk:
        fill(disk / "filler")  # the filesystem is now full
        ...
        (disk / "filler").unlink()  # space is back
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

__all__ = ["CannotMountError", "fill", "small_tmpfs"]


class CannotMountError(RuntimeError):
    """The tmpfs could not be mounted here (no root or ``CAP_SYS_ADMIN``, no ``mount`` command)."""


@contextlib.contextmanager
def small_tmpfs(mount_point: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of ``size`` (``mount -o size=``: ``64k``, ``8m``) at ``mount_point`` (created), unmounted after."""
    mount_point.mkdir(parents=True, exist_ok=True)
    try:
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)], capture_output=True, text=True
        )
    except OSError as err:
        raise CannotMountError(f"cannot run mount: {err}") from err
    if result.returncode != 0:
        reason = result.stderr.strip()
        raise CannotMountError(f"cannot mount a small tmpfs here (needs root or CAP_SYS_ADMIN): {reason}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(path: Path) -> None:
    """Take every free byte of ``path``'s filesystem (a file written until the disk is full)."""
    with path.open("wb", buffering=0) as filler, contextlib.suppress(OSError):
        while True:
            filler.write(b"\0" * 1024)
