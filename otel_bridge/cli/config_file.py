"""Which config file a command reads: ``--config``, else ``$OTEL_BRIDGE_CONFIG``, else ``./otel-bridge.yaml`` (what
``otel-bridge init`` writes) when it exists, else none (defaults plus ``OTEL_BRIDGE__...`` environment overrides).

Every command that reads a config (``doctor``, ``query``, ``tail``, ``discover``, ``prometheus-rules``) finds it this
way and says which file it found (``doctor`` in its ``config`` check, the others on stderr).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from otel_bridge.config import ENV_CONFIG_FILE as CONFIG_ENV
from otel_bridge.config import BridgeConfig
from otel_bridge.errors import ConfigError

DEFAULT_CONFIG: Final = Path("otel-bridge.yaml")
"""The file ``otel-bridge init`` writes, read from the current directory when nothing else names a config."""
CONFIG_HELP: Final = f"otel-bridge config file (default: ${CONFIG_ENV}, else ./{DEFAULT_CONFIG} if it exists)"


@dataclass(frozen=True, slots=True)
class ConfigChoice:
    """The config file a command reads (``None``: defaults plus environment) and why that one."""

    path: Path | None
    reason: str

    def describe(self) -> str:
        """One line for the user: ``config: otel-bridge.yaml (found in the current directory)``."""
        where = str(self.path) if self.path is not None else "none, defaults + environment"
        return f"config: {where} ({self.reason})"


def choose_config(
    explicit: Path | None, environ: Mapping[str, str] | None = None, cwd: Path | None = None
) -> ConfigChoice:
    """The config file to read; :class:`ConfigError` when ``$OTEL_BRIDGE_CONFIG`` names a file that does not exist."""
    environ = os.environ if environ is None else environ
    if explicit is not None:
        return ConfigChoice(explicit, "--config")
    named = environ.get(CONFIG_ENV, "").strip()
    if named:
        path = Path(named)
        try:
            is_file = path.is_file()
        except OSError:  # a name too long for the filesystem
            is_file = False
        if not is_file:
            shown = repr(named) if len(named) <= 200 else f"{named[:200]!r}... ({len(named)} characters)"
            raise ConfigError(f"${CONFIG_ENV} names {shown}, which is not a file; fix or unset {CONFIG_ENV}")
        return ConfigChoice(path, f"${CONFIG_ENV}")
    local = (cwd or Path.cwd()) / DEFAULT_CONFIG
    if local.is_file():
        return ConfigChoice(DEFAULT_CONFIG if cwd is None else local, "found in the current directory")
    return ConfigChoice(
        None, f"no --config, no ${CONFIG_ENV}, no ./{DEFAULT_CONFIG}: run otel-bridge init to write one"
    )


def announce_config(args: argparse.Namespace) -> ConfigChoice:
    """The config file of a command (``args.config``, else as :func:`choose_config` finds it); a file found without
    ``--config`` is named on stderr unless ``--quiet``."""
    choice = choose_config(args.config)
    if choice.path is not None and args.config is None and not getattr(args, "quiet", False):
        sys.stderr.write(f"otel-bridge: {choice.describe()}\n")
    return choice


def load_chosen_config(args: argparse.Namespace) -> BridgeConfig:
    """The config of a command (:func:`announce_config`), loaded."""
    return BridgeConfig.load(announce_config(args).path)
