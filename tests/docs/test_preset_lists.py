"""Issue 36: the lists of presets in the documents, the CLI's help and ``init``'s output are the one list
(``PRESET_NAMES``): none is stale when a preset is added."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from otel_bridge.cli import build_parser
from otel_bridge.cli.init import starter_config
from otel_bridge.config import PRESET_NAMES
from otel_bridge.producers.presets import MODEL_LABELS, PRESETS

REPO = Path(__file__).resolve().parents[2]
NAME = r"`?[a-z]+`?"
# a list of three or more preset-like names starting with vllm, joined by |, ", " or " | "
LISTED = re.compile(rf"`?vllm`?(?:\s*(?:\||,)\s*{NAME}){{2,}}")


def listed(text: str) -> list[list[str]]:
    return [re.findall(r"[a-z]+", match.group(0)) for match in LISTED.finditer(text)]


def test_the_presets_are_the_named_ones() -> None:
    assert tuple(PRESETS) == PRESET_NAMES
    assert set(MODEL_LABELS) <= set(PRESET_NAMES)


@pytest.mark.parametrize(
    "document",
    ["README.md", "docs/cli.md", "docs/configuration.md", "docs/architecture.md", "examples/otel-bridge.yaml"],
)
def test_every_list_of_presets_in_a_document_is_the_whole_list(document: str) -> None:
    lists = listed((REPO / document).read_text(encoding="utf-8"))
    for names in lists:
        assert tuple(names) == PRESET_NAMES, f"{document} lists the presets as {names}, not {list(PRESET_NAMES)}"


def test_the_documents_list_the_presets_somewhere() -> None:
    found = sum(len(listed((REPO / d).read_text(encoding="utf-8"))) for d in ("docs/cli.md", "docs/architecture.md"))
    assert found >= 2


def test_init_and_its_help_list_every_preset() -> None:
    text = starter_config(scrape=["127.0.0.1:8000"])
    assert [tuple(names) for names in listed(text)] == [PRESET_NAMES]
    init = build_parser()._subparsers._group_actions[0].choices["init"]  # type: ignore[union-attr]
    preset = next(a for a in init._actions if "--preset" in a.option_strings)
    assert tuple(preset.choices) == PRESET_NAMES
