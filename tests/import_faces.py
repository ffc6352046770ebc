"""The ``faces`` import-linter contract (pyproject.toml): the packages it names import the rest of the house only
through the faces of its packages, never from the modules inside them.

A package's face is its ``__init__`` and the names in its ``__all__`` (a package without ``__all__`` shows nothing). A
module is a face of its own when it is a floor of the house (a module right under the root package:
``otel_bridge.errors``, ``otel_bridge.window``...) or when its package's ``__all__`` names it
(``otel_bridge.prometheus`` exports its module ``promql``); a name imported from such a module must be in its
``__all__`` (or, without one, not start with ``_``). A module whose dotted path has a private part (``_internal``) is
never a face. Imports within the importer's own package (``otel_bridge.cli`` importing ``otel_bridge.cli.output``) are
its own business.

The check reads each module's source (its imports at any depth, lazy ones inside functions included), so it covers
packages outside the import graph too (``bench``). ``allowed`` lists known offenders as ``importer -> imported``
(modules); an allowance that matches no import any more breaks the contract, so the list only shrinks.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from importlinter import Contract, ContractCheck, fields, output


@dataclass(frozen=True, slots=True)
class Offence:
    """One import that goes past a face."""

    importer: str
    line: int
    imported: str
    why: str


@cache
def _root_dir(top: str) -> Path | None:
    """The directory of the top-level package ``top`` on the path, or ``None`` when it is not a package here."""
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _source(module: str) -> tuple[Path, bool] | None:
    """The file of ``module`` and whether it is a package (its ``__init__.py``); ``None`` when there is none."""
    top, *rest = module.split(".")
    root = _root_dir(top)
    if root is None:
        return None
    base = root.joinpath(*rest)
    if (base / "__init__.py").is_file():
        return base / "__init__.py", True
    if base.with_suffix(".py").is_file() and rest:
        return base.with_suffix(".py"), False
    return None


@cache
def _all_of(module: str) -> frozenset[str] | None:
    """The names of ``module``'s ``__all__`` (a literal list or tuple), ``None`` when it has none."""
    found = _source(module)
    if found is None:
        return None
    tree = ast.parse(found[0].read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        else:
            continue
        if value is not None and any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return frozenset(ast.literal_eval(value))
    return None


@cache
def _exported_modules(package: str) -> frozenset[str]:
    """The names of ``package``'s ``__all__`` that its ``__init__`` binds to a module of its own (``from
    otel_bridge.prometheus import promql``), not to a name taken from one (``from .connect import connect``)."""
    found = _source(package)
    if found is None or not found[1]:
        return frozenset()
    modules = set()
    for node in ast.walk(ast.parse(found[0].read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if node.module == package and _source(f"{package}.{alias.name}") is not None:
                    modules.add(alias.asname or alias.name)
    return frozenset(modules) & (_all_of(package) or frozenset())


def _is_face(module: str, roots: frozenset[str]) -> bool:
    """Whether ``module`` (a module, not a package) is a face of its own: a floor right under a root package, or a
    module its package exports (:func:`_exported_modules`)."""
    parent, _, name = module.rpartition(".")
    return parent in roots or name in _exported_modules(parent)


def _offences_of_name(module: str, name: str, roots: frozenset[str]) -> str | None:
    """Why importing ``name`` from ``module`` goes past a face (``None`` when it does not)."""
    found = _source(module)
    if found is None:
        return None  # not a module of the house (an attribute chain the import system resolves some other way)
    if any(part.startswith("_") for part in module.split(".")):
        return f"{module} is private"
    is_package = found[1]
    exported = _all_of(module)
    if is_package:
        if name in (exported or ()):
            return None
        inner = _source(f"{module}.{name}")
        if inner is not None and inner[1] and not name.startswith("_"):
            return None  # a sub-package: its own face is checked where its names are imported
        if inner is not None:
            return f"{module}.{name} is a module inside {module}: import what you need from {module}'s face"
        return f"{name} is not on the face of {module} (its __all__)"
    if not _is_face(module, roots):
        return f"{module} is a module inside {module.rpartition('.')[0]}: import {name} from that package's face"
    if exported is not None and name not in exported:
        return f"{name} is not in {module}.__all__"
    if exported is None and name.startswith("_"):
        return f"{name} is private to {module}"
    return None


def _offences_of_module(module: str, roots: frozenset[str]) -> str | None:
    """Why ``import module`` goes past a face (``None`` when it does not)."""
    found = _source(module)
    if found is None:
        return None
    if any(part.startswith("_") for part in module.split(".")):
        return f"{module} is private"
    if found[1] or _is_face(module, roots):
        return None
    return f"{module} is a module inside {module.rpartition('.')[0]}: import from that package's face"


def _modules_under(package: str) -> list[str]:
    """``package`` and every module under it, by dotted name."""
    found = _source(package)
    if found is None or not found[1]:
        raise ValueError(f"{package} is not a package on the path")
    directory = found[0].parent
    names = []
    for path in sorted(directory.rglob("*.py")):
        parts = path.relative_to(directory).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join((package, *parts)))
    return names


def _absolute(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module of a ``from ... import`` in ``importer``."""
    if not node.level:
        return node.module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def offences(importers: list[str], roots: frozenset[str]) -> list[Offence]:
    """Every import by a module under ``importers`` that goes past a face of a package under ``roots``."""
    found: list[Offence] = []
    for territory in importers:
        for importer in _modules_under(territory):
            path, is_package = _source(importer) or (None, False)
            assert path is not None
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    module = _absolute(importer, is_package, node)
                    if not _concerns(module, territory, roots):
                        continue
                    for alias in node.names:
                        why = _offences_of_name(module, alias.name, roots)
                        if why is not None:
                            found.append(Offence(importer, node.lineno, _imported(module, alias.name), why))
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if _concerns(alias.name, territory, roots):
                            why = _offences_of_module(alias.name, roots)
                            if why is not None:
                                found.append(Offence(importer, node.lineno, alias.name, why))
    return found


def _concerns(module: str, territory: str, roots: frozenset[str]) -> bool:
    """An import of ``module`` is checked: it is in the house and outside the importer's own package."""
    in_house = module.split(".")[0] in {r.split(".")[0] for r in roots}
    own = module == territory or module.startswith(territory + ".")
    return in_house and not own


def _imported(module: str, name: str) -> str:
    """The module an import reaches: ``module.name`` when that is a module, else ``module``."""
    return f"{module}.{name}" if _source(f"{module}.{name}") is not None else module


class FacesContract(Contract):
    """``importers`` (packages, on the path) import the packages of ``roots`` only through their faces (see the
    module docstring); ``allowed``: known offenders as ``importer -> imported`` modules."""

    type_name = "faces"

    importers = fields.ListField(subfield=fields.StringField())
    roots = fields.ListField(subfield=fields.StringField())
    allowed = fields.ListField(subfield=fields.StringField(), required=False, default=[])

    def check(self, graph: Any, verbose: bool) -> ContractCheck:
        importers = [str(i) for i in self.importers]  # type: ignore[attr-defined]
        roots = frozenset(str(r) for r in self.roots)  # type: ignore[attr-defined]
        allowed = {tuple(part.strip() for part in str(a).split("->")) for a in self.allowed}  # type: ignore[attr-defined]
        found = offences(importers, roots)
        used = {(o.importer, o.imported) for o in found} & allowed
        broken = [o for o in found if (o.importer, o.imported) not in allowed]
        stale = sorted(" -> ".join(a) for a in allowed - used)
        return ContractCheck(kept=not broken and not stale, metadata={"offences": broken, "stale": stale})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for offence in check.metadata["offences"]:
            output.print_error(f"{offence.importer}:{offence.line} imports {offence.imported}: {offence.why}")
        for stale in check.metadata["stale"]:
            output.print_error(f"the allowance '{stale}' matches no import any more: remove it from pyproject.toml")
        output.new_line()
