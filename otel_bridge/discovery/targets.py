"""Scrape targets of the rollout servers, registered explicitly.

A rollout-server registration (:data:`RolloutServers`) is one of:

- a list of ``host:port`` strings;
- a callable returning such a list (asked again at every resolution, e.g. by a
  :class:`~otel_bridge.discovery.watcher.TargetWatcher`);
- a list of Ray actor handles whose actor class defines a method (default ``metrics_address``) returning its metrics
  endpoint as ``host:port`` (:class:`MetricsAddressActor`).

Targets are always returned as a sorted, de-duplicated list of ``host:port`` strings, the form Prometheus'
``static_configs`` and ``scrape.targets`` take.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeAlias, runtime_checkable

from otel_bridge.errors import ConfigError

_log = logging.getLogger(__name__)

_HOSTPORT = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.\-]*[A-Za-z0-9])?):(\d{1,5})$")

DEFAULT_ACTOR_METHOD = "metrics_address"


class RemoteMethod(Protocol):
    """A Ray actor's method as seen through its handle: ``.remote()`` returns an ``ObjectRef``."""

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        """Call the method on the actor; returns an ``ObjectRef``."""


@runtime_checkable
class MetricsAddressActor(Protocol):
    """A Ray actor handle of a rollout server whose actor class defines::

        def metrics_address(self) -> str:
            return f"{node_ip}:{metrics_port}"   # where its Prometheus /metrics endpoint listens

    Another method name can be passed as ``method=`` to :func:`rollout_targets`.
    """

    metrics_address: RemoteMethod


RolloutServers: TypeAlias = Sequence[str] | Callable[[], Iterable[str]] | Sequence[MetricsAddressActor]
"""How rollout servers are registered: ``host:port`` strings, a callable returning them, or actor handles."""


def validate_target(value: object, where: str = "target") -> str:
    """``value`` if it is a ``host:port`` string (IPv6 in brackets), else :class:`ConfigError` saying so."""
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a 'host:port' string, got {type(value).__name__} {value!r}")
    text = value.strip()
    if "@" in text.split("://", 1)[-1].split("/", 1)[0]:  # never echoed: the password is in it
        raise ConfigError(
            f"{where} contains credentials (user:password@...), which are refused: give host:port only and set "
            "scrape.auth for targets that need credentials"
        )
    match = _HOSTPORT.match(text)
    if match is None or not 0 < int(match.group(1)) < 65536:
        hint = " (drop the scheme and path: Prometheus targets are host:port)" if "://" in text else ""
        raise ConfigError(f"{where} {value!r} is not 'host:port' with a port in 1..65535{hint}")
    return text


def normalize_targets(values: Iterable[object], where: str = "target") -> list[str]:
    """Validated, de-duplicated, sorted ``host:port`` targets."""
    return sorted({validate_target(value, where) for value in values})


def rollout_targets(
    servers: RolloutServers,
    *,
    method: str = DEFAULT_ACTOR_METHOD,
    timeout_s: float = 10.0,
) -> list[str]:
    """Resolve a rollout-server registration (see the module docstring) into sorted ``host:port`` targets.

    Actor handles are asked through Ray (which must be initialised), waiting at most ``timeout_s`` for all answers.
    Raises :class:`ConfigError` for malformed addresses and :class:`~otel_bridge.errors.DiscoveryError` when actors
    cannot be asked.
    """
    if isinstance(servers, str):
        raise ConfigError(
            f"rollout servers must be a list of 'host:port' strings, not one string ({servers!r}): wrap it in a list"
        )
    if callable(servers):
        produced = servers()
        if isinstance(produced, str):
            raise ConfigError(
                f"the rollout-server callable returned one string ({produced!r}); it must return a list of 'host:port'"
            )
        targets = normalize_targets(produced, "rollout server address")
        _log.debug("rollout servers from callable: %s", targets)
        return targets
    items = list(servers)
    if items and all(isinstance(item, str) for item in items):
        return normalize_targets(items, "rollout server address")
    if any(isinstance(item, str) for item in items):
        raise ConfigError("rollout servers mix 'host:port' strings and other objects: register one kind only")
    if not items:
        return []
    from otel_bridge.discovery.ray_cluster import actor_metrics_addresses  # imports ray lazily

    answers = actor_metrics_addresses(items, method, timeout_s)
    targets = normalize_targets(answers, f"rollout server actor {method}() answer")
    _log.debug("rollout servers from %d actor(s): %s", len(items), targets)
    return targets
