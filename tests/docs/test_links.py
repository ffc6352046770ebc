"""Every relative link in the documentation resolves: the file (or folder) exists, and a ``#anchor`` names a heading
of the target page (GitHub's heading ids) or an explicit ``id``/``name``.

Links inside code (fenced blocks, inline code spans) are not links and are left alone; links with a scheme
(``https:``, ``mailto:``) are not checked.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted(
    {
        REPO / "README.md",
        REPO / "SECURITY.md",
        REPO / "examples" / "README.md",
        REPO / "deploy" / "README.md",
        REPO / "bench" / "README.md",
        REPO / "soak" / "README.md",
        *(REPO / "docs").glob("*.md"),
    }
)

_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.M)
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$", re.M)
_HTML_ID = re.compile(r"<[a-z][^>]*\b(?:id|name)=\"([^\"]+)\"", re.I)
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


def prose(text: str) -> str:
    """``text`` without fenced code blocks, inline code spans and HTML comments."""
    return _CODE_SPAN.sub("", _FENCE.sub("", _COMMENT.sub("", text)))


def slug(heading: str) -> str:
    """The id GitHub gives a heading: its text lower-cased, every character but letters, digits, ``_``, ``-`` and
    spaces removed, spaces turned into ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays, its target goes
    text = re.sub(r"<[^>]+>", "", text)
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    """Every id a link can name in ``page``: its headings' (repeated ones get ``-1``, ``-2``, ...) and HTML ids."""
    text = _FENCE.sub("", _COMMENT.sub("", page.read_text(encoding="utf-8")))
    found: set[str] = set()
    seen: dict[str, int] = {}
    for match in _HEADING.finditer(text):
        base = slug(match[2])
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    found.update(_HTML_ID.findall(text))
    return frozenset(found)


def links(page: Path) -> list[str]:
    text = prose(page.read_text(encoding="utf-8"))
    return [target for target in _INLINE_LINK.findall(text) + _REFERENCE.findall(text) if target]


def problem(page: Path, target: str) -> str | None:
    """What is wrong with the link ``target`` of ``page``, or ``None`` when it resolves."""
    if _SCHEME.match(target):
        return None
    path_part, _, anchor = target.partition("#")
    resolved = (page.parent / path_part).resolve() if path_part else page
    if not resolved.is_relative_to(REPO):
        return f"{target}: leaves the repository"
    if not resolved.exists():
        return f"{target}: {resolved.relative_to(REPO)} does not exist"
    if anchor:
        if resolved.is_dir() or resolved.suffix != ".md":
            return f"{target}: an anchor into {resolved.relative_to(REPO)}, which is not a Markdown page"
        if anchor not in anchors(resolved):
            near = sorted(anchors(resolved), key=lambda a: (a[:1] != anchor[:1], a))[:8]
            return f"{target}: no heading #{anchor} in {resolved.relative_to(REPO)} (it has: {', '.join(near)} ...)"
    return None


def test_the_pages_exist() -> None:
    missing = [page for page in PAGES if not page.is_file()]
    assert not missing, missing
    assert (REPO / "docs" / "configuration.md") in PAGES


@pytest.mark.parametrize("page", PAGES, ids=[str(page.relative_to(REPO)) for page in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    problems = [p for target in links(page) if (p := problem(page, target))]
    assert not problems, f"{page.relative_to(REPO)}:\n  " + "\n  ".join(problems)


def test_slugs_are_githubs() -> None:
    assert slug("What a step's numbers mean") == "what-a-steps-numbers-mean"
    assert slug("`doctor --json`") == "doctor---json"
    assert slug("Known (December 2026)") == "known-december-2026"
    assert slug("Inside verl's own trainer: `patch_verl()`") == "inside-verls-own-trainer-patch_verl"
    assert slug("[docs](x.md) and more") == "docs-and-more"


def test_the_checker_finds_broken_links(tmp_path: Path) -> None:
    """The checker is not vacuous: a missing file, a missing anchor and a link leaving the repository are problems;
    links in code are not links."""
    readme = REPO / "README.md"
    assert problem(readme, "docs/no-such-page.md") is not None
    assert problem(readme, "docs/configuration.md#no-such-heading") is not None
    assert problem(readme, "#no-such-heading") is not None
    assert problem(readme, "../outside.md") is not None
    assert problem(readme, "docs/configuration.md#presets") is None
    assert problem(readme, "https://example.com/#anything") is None
    assert links(readme)  # the README has links, and they are found
    page = tmp_path / "page.md"
    page.write_text("`[a](nowhere.md)`\n\n```\n[b](nowhere.md)\n```\n\n[c](elsewhere.md)\n", encoding="utf-8")
    assert links(page) == ["elsewhere.md"]
