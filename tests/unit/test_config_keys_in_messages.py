"""Every config key a message of ``otel_bridge`` tells the user to set or check exists in the config model.

The keys are read from the source: every string literal (f-string pieces included) outside docstrings, every
``<section>.<key>[.<key>...]`` whose section is a top-level field of :class:`BridgeConfig` (``prometheus.tls.ca_file``,
``scrape.timeout_s``, ``delivery.queue_size``...). Each is resolved through the pydantic models, nested sections and
lists of models included. File names such as ``prometheus.yml`` or ``metrics.jsonl`` are not keys.
"""

from __future__ import annotations

import ast
import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel

import otel_bridge
from otel_bridge.config import BridgeConfig

PACKAGE = Path(otel_bridge.__file__).parent
FILE_SUFFIXES = frozenset({"yml", "yaml", "json", "jsonl", "log", "txt", "py", "md", "toml", "csv", "png"})
KEY = re.compile(
    rf"(?<![\w./-])({'|'.join(sorted(BridgeConfig.model_fields, key=len, reverse=True))})((?:\.[A-Za-z_]\w*)+)"
)


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of ``tree``."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def keys_in_source(source: str) -> Iterator[tuple[int, str]]:
    """``(line, key)`` for every config key named by a string literal of ``source`` outside docstrings."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            for match in KEY.finditer(node.value):
                if match.group(2).rsplit(".", 1)[-1] not in FILE_SUFFIXES:
                    yield node.lineno, match.group(0)


def _models(annotation: object) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (``X``, ``X | None``, ``list[X]``, ``dict[str, X]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is not None:
        return [m for arg in typing.get_args(annotation) for m in _models(arg)]
    return []


def is_config_key(key: str, model: type[BaseModel] = BridgeConfig) -> bool:
    """Whether the dotted ``key`` names a field of ``model`` (through nested models)."""
    head, _, rest = key.partition(".")
    field = model.model_fields.get(head)
    if field is None:
        return False
    return not rest or any(is_config_key(rest, nested) for nested in _models(field.annotation))


def test_every_key_named_in_a_message_exists() -> None:
    named = [
        (f"{path.relative_to(PACKAGE.parent)}:{line}", key)
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, key in keys_in_source(path.read_text(encoding="utf-8"))
    ]
    assert len(named) > 100  # the messages do name keys: the pattern finds them
    unknown = [f"{where}: {key}" for where, key in named if not is_config_key(key)]
    assert not unknown, "config keys that do not exist:\n" + "\n".join(unknown)


def test_the_check_catches_keys_that_do_not_exist() -> None:
    source = '''
"""A docstring naming prometheus.nothing is documentation, not a message."""
def f(token):
    raise ValueError(f"check prometheus.bearer_token / prometheus.auth.bearer_token_env ({token})")
LOG = "see prometheus.yml and runs/x/metrics.jsonl; set scrape.tls.ca_file or scrape.tls.nope"
'''
    keys = sorted(key for _, key in keys_in_source(source))
    assert keys == [
        "prometheus.auth.bearer_token_env",
        "prometheus.bearer_token",
        "scrape.tls.ca_file",
        "scrape.tls.nope",
    ]
    assert [k for k in keys if not is_config_key(k)] == ["prometheus.bearer_token", "scrape.tls.nope"]
    assert is_config_key("metrics.ratio.numerator")  # through a list of models and an optional model
    assert is_config_key("otel.otlp.endpoint")
    assert not is_config_key("prometheus.url.host")  # url is a value, not a section
