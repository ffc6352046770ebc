"""One logger convention (issue 13 item 6): a module's own logger is ``_log = logging.getLogger(__name__)``."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "otel_bridge"
MODULE_LOGGER = re.compile(r"^(\w+)\s*=\s*logging\.getLogger\((.*)\)\s*$", re.MULTILINE)


def test_every_module_logger_is_named_after_its_module() -> None:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for name, argument in MODULE_LOGGER.findall(path.read_text(encoding="utf-8")):
            if (name, argument) != ("_log", "__name__"):
                wrong.append(f"{path.relative_to(PACKAGE.parent)}: {name} = logging.getLogger({argument})")
    assert not wrong, "\n".join(wrong)
