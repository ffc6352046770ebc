"""Check otel_bridge's import structure: no import cycle, no import from a lower layer to a higher one, no module
over the size limit.

    python -m tests.check_imports [--source DIR]

The layers are DESIGN.md's ``cli/integrations -> bridge -> reader, producers, exporters -> prometheus, discovery,
window``, with the modules DESIGN does not name placed where their imports put them (below). A module may import from
its own layer or any lower one. Every import counts, also one inside a function (a lazy import is still a dependency)
or under ``TYPE_CHECKING``. A module that is in no layer is an error too: place it when you add it.

Exit status 0 when the structure is sound, 1 with one line per problem otherwise.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "otel_bridge"

LAYERS: Sequence[tuple[str, Sequence[str]]] = (
    # (layer, module prefixes), highest first
    ("public API", ("otel_bridge",)),  # the package's __init__ only: it re-exports from every layer
    ("entry points", ("otel_bridge.cli", "otel_bridge.integrations", "otel_bridge.tools")),
    (
        "facade",
        (
            "otel_bridge.bridge",
            "otel_bridge.pipeline",
        ),
    ),
    (
        "pipeline",
        ("otel_bridge.reader", "otel_bridge.pipeline.reader", "otel_bridge.producers", "otel_bridge.exporters"),
    ),
    # config sits beside prometheus/: it validates names with prometheus/promql.py's patterns, and
    # prometheus/connect.py builds a client from it (module by module, no cycle)
    (
        "sources",
        (
            "otel_bridge.prometheus",
            "otel_bridge.http",
            "otel_bridge.discovery",
            "otel_bridge.config",
        ),
    ),
    (
        "model",
        (
            "otel_bridge.schema",
            "otel_bridge.window",
            "otel_bridge.pipeline.phases",
            "otel_bridge.prometheus_names",
        ),
    ),
    (
        "foundation",
        (
            "otel_bridge.errors",
            "otel_bridge.health",
            "otel_bridge.ratelimit",
            "otel_bridge.config.load",
            "otel_bridge.config.messages",
            "otel_bridge.suppression",
            "otel_bridge.pipeline.infra_deadline",
        ),
    ),
)


@dataclass(frozen=True)
class Import:
    """``importer`` imports ``imported`` at ``line``."""

    importer: str
    imported: str
    line: int


def modules(source: Path, package: str = PACKAGE) -> dict[str, Path]:
    """Every module of ``package`` under ``source``: dotted name -> file (a package is its ``__init__.py``)."""
    found: dict[str, Path] = {}
    for path in sorted((source / package).rglob("*.py")):
        parts = list(path.relative_to(source).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports(source: Path, package: str = PACKAGE) -> list[Import]:
    """Every import of one of ``package``'s modules by another, wherever in the file it is."""
    known = modules(source, package)
    out: list[Import] = []
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, path.name == "__init__.py", node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            for target in targets:
                while target and target not in known:  # `import otel_bridge.x.y` where y is not a module: x
                    target = target.rpartition(".")[0]
                if target and target != name:
                    out.append(Import(name, target, node.lineno))
    return sorted(set(out), key=lambda i: (i.importer, i.line, i.imported))


def layer_of(module: str) -> int | None:
    """Index of ``module``'s layer in :data:`LAYERS` (0 = highest), by its longest matching prefix."""
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix or (prefix != PACKAGE and module.startswith(prefix + "."))
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    return None if best is None else best[1]


def cycles(edges: Sequence[Import]) -> list[list[str]]:
    """The import cycles among ``edges``: one list of modules per strongly connected component of two or more."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.importer, set()).add(edge.imported)
        graph.setdefault(edge.imported, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for child in sorted(graph[node]):
            if child not in index:
                visit(child)
                low[node] = min(low[node], low[child])
            elif child in on_stack:
                low[node] = min(low[node], index[child])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def problems(source: Path) -> Iterator[str]:
    """One line per problem in the package under ``source``."""
    known = modules(source)
    for name in sorted(known):
        if layer_of(name) is None:
            yield f"{name}: in no layer; add it to LAYERS in tests/check_imports.py (and to docs/architecture.md)"
    edges = imports(source)
    for edge in edges:
        low, high = layer_of(edge.importer), layer_of(edge.imported)
        if low is not None and high is not None and high < low:
            yield (
                f"{edge.importer} (layer {LAYERS[low][0]!r}) imports {edge.imported} (layer {LAYERS[high][0]!r}, "
                f"higher) at line {edge.line}"
            )
    by_pair: Mapping[tuple[str, str], int] = {(e.importer, e.imported): e.line for e in edges}
    for component in cycles(edges):
        members = set(component)
        links = [f"{a}:{line} -> {b}" for (a, b), line in sorted(by_pair.items()) if a in members and b in members]
        yield f"import cycle among {', '.join(component)} ({'; '.join(links)})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--source", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args(argv)
    found = list(problems(args.source))
    for line in found:
        print(line)
    if not found:
        print(f"{len(modules(args.source))} modules: no cycle, no upward import")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
