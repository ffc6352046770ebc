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
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from otel_bridge.errors import ConfigError

ENV_PREFIX = "OTEL_BRIDGE__"
ENV_PROMETHEUS_URL = "OTEL_BRIDGE_PROMETHEUS_URL"
ENV_CONFIG_FILE = "OTEL_BRIDGE_CONFIG"
"""The config file the CLI commands and verl's setup hook read when no config is passed (docs/cli.md, docs/verl.md)."""
AUTO = "auto"


Lines = dict[tuple[int | str, ...], int]
"""Where each key and list item of a YAML file is: its path (``("prometheus", "url")``, ``("metrics", 0)``) -> line."""


def open_regular_file(path: Path, what: str) -> BinaryIO:
    """``path`` open for reading in binary mode when it is a regular file (a symbolic link to one included); a
    :class:`ConfigError` naming ``what`` and the path otherwise.

    The file is opened without blocking (opening a FIFO no one writes to would wait for ever) and checked on the open
    descriptor, so a FIFO, a device (``/dev/zero``), a socket or a directory is refused before anything is read and
    cannot be swapped in between the check and the read. Readers still read bounded: a regular file can grow."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ConfigError(f"{what} {path} is {_file_kind(mode)}, not a regular file: name a file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def read_yaml(path: Path) -> dict[str, Any]:
    """The mapping at the top of the YAML file ``path`` (``{}`` for an empty file); a :class:`ConfigError` otherwise."""
    return read_yaml_lines(path)[0]


MAX_FILE_BYTES = 16 << 20
"""The largest configuration file read (16 MiB: a real one is a few kilobytes)."""
MAX_SECRET_BYTES = 64 << 10
"""The largest secret file read (64 KiB: a token or password is far shorter)."""
MAX_VALUES = 1_000_000
"""The most values (scalars, lists and mappings, each alias counted as what it expands to) a file may hold."""

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: fast, and bounds nesting


def read_yaml_lines(path: Path) -> tuple[dict[str, Any], Lines]:
    """:func:`read_yaml`, and the line of every key and list item (for errors that name the line).

    Bounded: a file over :data:`MAX_FILE_BYTES` is refused unread, the text is parsed once, and a document that
    expands (through YAML aliases) to more than :data:`MAX_VALUES` values, refers to itself or nests deeper than the
    parser allows is a :class:`ConfigError` before anything is built from it."""
    try:
        with open_regular_file(path, "config file") as file:
            raw = file.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(
            f"config file {path} is larger than {MAX_FILE_BYTES >> 20} MiB; an otel-bridge config is a few kilobytes: "
            "check that the path names the config file"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text") from None
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return {}, {}
        _check_expansion(node, path)
        data = loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {yaml_problem(exc)}") from None
    except RecursionError:
        raise ConfigError(f"config file {path} nests lists or mappings too deeply to read; flatten it") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level, not {type(data).__name__}")
    lines: Lines = {}
    _note_lines(node, lines)
    return {str(k): v for k, v in data.items()}, lines


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_expansion(root: yaml.Node, path: Path) -> None:
    """Refuse a document that expands to more than :data:`MAX_VALUES` values or refers to itself (an alias inside its
    own anchor). Each list and mapping is visited once (aliases share their node), without recursion."""
    sizes: dict[int, int] = {}  # id(collection node) -> the values it expands to, itself included
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, list[yaml.Node] | None]] = [(root, None)]
    while stack:
        node, children = stack.pop()
        key = id(node)
        if children is not None:  # its collections are done
            on_path.discard(key)
            size = 1 + sum(sizes.get(id(child), 1) for child in children)
            if size > MAX_VALUES:
                raise ConfigError(
                    f"config file {path} expands to more than {MAX_VALUES:,} values (through YAML aliases: *name "
                    "repeats &name's value); write the values out or use fewer aliases"
                )
            sizes[key] = size
            continue
        if key in sizes:
            continue
        if key in on_path:
            raise ConfigError(f"config file {path} holds a YAML alias inside its own anchor (line {_line(node)})")
        on_path.add(key)
        children = _children(node)
        stack.append((node, children))
        stack.extend((c, None) for c in children if not isinstance(c, yaml.ScalarNode) and id(c) not in sizes)


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def _note_lines(root: yaml.Node, lines: Lines) -> None:
    """Each key's and list item's line, by path; a node reached again through an alias is noted once (at its
    anchor's path): errors under an alias name the alias' line."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, tuple[int | str, ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                here = (*path, str(key.value))
                lines[here] = _line(key)
                stack.append((value, here))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                lines[(*path, index)] = _line(item)
                stack.append((item, (*path, index)))


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
            with open_regular_file(file, f"the {what} file") as handle:
                raw = handle.read(MAX_SECRET_BYTES + 1)
            if len(raw) > MAX_SECRET_BYTES:
                raise ConfigError(
                    f"the {what} file {file} is larger than {MAX_SECRET_BYTES >> 10} KiB: check that it holds the "
                    f"{what} alone"
                )
            value = raw.decode("utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"cannot read the {what} file {file}: {exc.strerror}; fix the path") from None
        except UnicodeDecodeError:
            raise ConfigError(f"the {what} file {file} is not UTF-8 text; fix its content") from None
        if not value:
            raise ConfigError(f"the {what} file {file} is empty: put the {what} in it")
        return value
    return None
