"""Where Prometheus is: a resolver chain, tried in this order, the first source that is set wins.

1. the configured value (``prometheus.url``): a URL, or ``auto`` / unset meaning "discover";
2. environment variable ``OTEL_BRIDGE_PROMETHEUS_URL``;
3. environment variable ``RAY_PROMETHEUS_HOST`` (the variable Ray's dashboard reads to find Prometheus);
4. the Ray head node (``use_ray=True``): the one alive node of ``ray.nodes()`` holding resource
   ``node:__internal_head__``, Prometheus at ``http://<its NodeManagerAddress>:<ray_port>`` (default 9090). This
   needs ``ray.init()`` to have been called in this process.

Each step logs (INFO) what it found. There is no fallback to localhost nor to an arbitrary node: when nothing is
found, :class:`~otel_bridge.errors.DiscoveryError` lists every source tried and what it held. A source that is set but
is not an http(s) URL is a :class:`~otel_bridge.errors.ConfigError` naming it. Nothing is contacted: the URL is only
resolved.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from otel_bridge.config import AUTO, ENV_PROMETHEUS_URL
from otel_bridge.errors import ConfigError, DiscoveryError

_log = logging.getLogger(__name__)

ENV_RAY_PROMETHEUS_HOST = "RAY_PROMETHEUS_HOST"
DEFAULT_RAY_PROMETHEUS_PORT = 9090

SOURCE_CONFIG = "config"
SOURCE_ENV = f"env {ENV_PROMETHEUS_URL}"
SOURCE_RAY_ENV = f"env {ENV_RAY_PROMETHEUS_HOST}"
SOURCE_RAY_HEAD = "ray head"

_URL = re.compile(r"^https?://[^/\s?#]+(/[^\s]*)?$")


@dataclass(frozen=True, slots=True)
class Resolution:
    """A resolved Prometheus URL, the source it came from, and what was tried before it."""

    url: str
    source: str
    tried: tuple[str, ...] = ()


def _check_url(value: str, where: str, example: str) -> str:
    text = value.strip()
    if not _URL.match(text):
        raise ConfigError(f"{where} = {value!r} is not an http:// or https:// URL: set it to e.g. {example}")
    return text.rstrip("/")


def resolve_prometheus_url(
    configured: str | None,
    *,
    environ: Mapping[str, str] | None = None,
    ray_port: int = DEFAULT_RAY_PROMETHEUS_PORT,
    use_ray: bool = True,
) -> Resolution:
    """Resolve the Prometheus base URL through the chain in the module docstring.

    ``configured`` is the config value: a URL is used as is; ``None`` or ``"auto"`` go on down the chain.
    ``environ`` defaults to ``os.environ``. ``ray_port`` is Prometheus' port on the Ray head node. With
    ``use_ray=False`` the Ray head is not consulted (and ``ray`` is not imported).
    """
    environ = os.environ if environ is None else environ
    if not 0 < ray_port < 65536:
        raise ConfigError(f"ray_port = {ray_port} is not a TCP port: use 1..65535 (Prometheus' default is 9090)")
    tried: list[str] = []

    def found(url: str, source: str) -> Resolution:
        _log.info("Prometheus URL: %s (from %s)", url, source)
        return Resolution(url, source, tuple(tried))

    def nothing(entry: str) -> None:
        tried.append(entry)
        _log.info("Prometheus URL: %s", entry)

    # 1. the configured value
    if configured is not None and configured.strip().lower() != AUTO:
        return found(
            _check_url(configured, "prometheus.url", "http://10.0.0.1:9090 (or 'auto' to discover)"), SOURCE_CONFIG
        )
    nothing(f"{SOURCE_CONFIG}: prometheus.url is " + ("'auto' (discover)" if configured is not None else "not set"))

    # 2. our own environment variable
    value = environ.get(ENV_PROMETHEUS_URL, "")
    if value.strip():
        return found(
            _check_url(value, f"environment variable {ENV_PROMETHEUS_URL}", "http://10.0.0.1:9090"), SOURCE_ENV
        )
    nothing(f"{SOURCE_ENV}: not set")

    # 3. Ray's environment variable
    value = environ.get(ENV_RAY_PROMETHEUS_HOST, "")
    if value.strip():
        return found(
            _check_url(value, f"environment variable {ENV_RAY_PROMETHEUS_HOST}", "http://10.0.0.1:9090"),
            SOURCE_RAY_ENV,
        )
    nothing(f"{SOURCE_RAY_ENV}: not set")

    # 4. the Ray head node
    if not use_ray:
        nothing(f"{SOURCE_RAY_HEAD}: not consulted (use_ray=False)")
    else:
        from otel_bridge.discovery import ray_cluster  # the only module importing ray, lazily

        try:
            address = ray_cluster.head_node_address()
        except (ConfigError, DiscoveryError) as exc:
            nothing(f"{SOURCE_RAY_HEAD}: {exc}")
        else:
            return found(f"http://{ray_cluster.format_hostport(address, ray_port)}", SOURCE_RAY_HEAD)

    raise DiscoveryError(
        "cannot find Prometheus: set prometheus.url (e.g. http://10.0.0.1:9090) or "
        f"{ENV_PROMETHEUS_URL}, or call ray.init() so the Ray head node can be used",
        tried=tried,
    )
