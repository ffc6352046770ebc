"""Where configuration values come from: YAML files, ``OTEL_BRIDGE__...`` environment overrides, and the secrets that
environment variables or files hold.

Environment overrides (applied after the file/dict, before validation):

- ``OTEL_BRIDGE__<SECTION>__<KEY>=value`` sets any nested key, e.g. ``OTEL_BRIDGE__PROMETHEUS__TIMEOUT_S=5``;
  the value is read as a YAML scalar/list (``5``, ``true``, ``[a, b]``).
- ``OTEL_BRIDGE_PROMETHEUS_URL`` sets ``prometheus.url`` when the config leaves it unset or ``auto`` (an explicit
  URL in the config wins; ``OTEL_BRIDGE__PROMETHEUS__URL`` overrides it).

:meth:`BridgeConfig.load <otel_bridge.config.BridgeConfig.load>` applies them; a secret is read when a client is built
(:meth:`AuthConfig.bearer_token <otel_bridge.config.AuthConfig.bearer_token>`).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from otel_bridge.errors import ConfigError

ENV_PREFIX = "OTEL_BRIDGE__"
ENV_PROMETHEUS_URL = "OTEL_BRIDGE_PROMETHEUS_URL"
ENV_CONFIG_FILE = "OTEL_BRIDGE_CONFIG"
"""The config file the CLI commands and verl's setup hook read when no config is passed (docs/cli.md, docs/verl.md)."""
AUTO = "auto"


Lines = dict[tuple[int | str, ...], int]
"""Where each key and list item of a YAML file is: its path (``("prometheus", "url")``, ``("metrics", 0)``) -> line."""


def read_yaml(path: Path) -> dict[str, Any]:
    """The mapping at the top of the YAML file ``path`` (``{}`` for an empty file); a :class:`ConfigError` otherwise."""
    return read_yaml_lines(path)[0]


def read_yaml_lines(path: Path) -> tuple[dict[str, Any], Lines]:
    """:func:`read_yaml`, and the line of every key and list item (for errors that name the line)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {yaml_problem(exc)}") from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level, not {type(data).__name__}")
    lines: Lines = {}
    _note_lines(yaml.compose(text, Loader=yaml.SafeLoader), (), lines)
    return {str(k): v for k, v in data.items()}, lines


def _note_lines(node: yaml.Node | None, path: tuple[int | str, ...], lines: Lines) -> None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            here = (*path, str(key.value))
            lines[here] = key.start_mark.line + 1
            _note_lines(value, here, lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + 1
            _note_lines(item, (*path, index), lines)


def yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error on one line, placed by line and column of the file (``line 4, column 1: expected ...``)."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return " ".join(str(exc).split())
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    text = where + (exc.problem or "invalid YAML")
    if exc.context:
        context_mark = exc.context_mark
        at = f" at line {context_mark.line + 1}, column {context_mark.column + 1}" if context_mark is not None else ""
        text += f" ({exc.context}{at})"
    return text


def apply_env_overrides(data: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """Return ``data`` with ``OTEL_BRIDGE__A__B=value`` and ``OTEL_BRIDGE_PROMETHEUS_URL`` applied."""
    out: dict[str, Any] = copy.deepcopy(data)
    overrides: list[tuple[list[str], str]] = []
    configured_url = (out.get("prometheus") or {}).get("url") if isinstance(out.get("prometheus"), dict) else None
    if environ.get(ENV_PROMETHEUS_URL) and configured_url in (None, AUTO):
        overrides.append((["prometheus", "url"], environ[ENV_PROMETHEUS_URL]))
    for name, raw in sorted(environ.items()):
        if name.startswith(ENV_PREFIX) and len(name) > len(ENV_PREFIX):
            overrides.append(([part.lower() for part in name[len(ENV_PREFIX) :].split("__")], raw))
    for path, raw in overrides:
        try:
            value = yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            value = raw
        node = out
        for part in path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = dict(child) if isinstance(child, Mapping) else {}
                node[part] = child
            node = child
        node[path[-1]] = value
    return out


def read_secret(what: str, env: str | None, file: Path | None, environ: Mapping[str, str] | None) -> str | None:
    """The secret ``what`` read now from environment variable ``env`` or ``file`` (``None`` when neither is set);
    a :class:`ConfigError` saying what to fix when it is missing, unreadable or empty. Never echoes the secret."""
    environ = os.environ if environ is None else environ
    if env is not None:
        value = environ.get(env)
        if not value:
            raise ConfigError(f"the {what} comes from environment variable {env}, which is not set or empty: set it")
        return value.strip()
    if file is not None:
        try:
            value = file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"cannot read the {what} file {file}: {exc.strerror}; fix the path") from None
        except UnicodeDecodeError:
            raise ConfigError(f"the {what} file {file} is not UTF-8 text; fix its content") from None
        if not value:
            raise ConfigError(f"the {what} file {file} is empty: put the {what} in it")
        return value
    return None
