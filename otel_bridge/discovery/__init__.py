"""Where things are: the Prometheus URL (config, env, Ray head) and scrape targets (rollout servers, Ray).

- :func:`resolve_prometheus_url`: config value -> ``OTEL_BRIDGE_PROMETHEUS_URL`` -> ``RAY_PROMETHEUS_HOST`` -> Ray
  head node (:mod:`otel_bridge.discovery.prometheus_url`).
- :func:`rollout_targets`: rollout servers registered as ``host:port`` strings, a callable, or Ray actor handles.
- :func:`ray_service_discovery_targets` / :func:`find_service_discovery_file`: Ray's Prometheus service-discovery file.
- :func:`ray_node_targets`: the alive Ray nodes' metrics export ports, from ``ray.nodes()``.
- :class:`TargetWatcher`: re-resolves targets on a daemon thread and reports changes.

``ray`` is imported only by :mod:`otel_bridge.discovery.ray_cluster`, lazily, when a Ray source is used.
"""

from otel_bridge.discovery.prometheus_url import (
    DEFAULT_RAY_PROMETHEUS_PORT,
    ENV_RAY_PROMETHEUS_HOST,
    Resolution,
    resolve_prometheus_url,
)
from otel_bridge.discovery.ray_cluster import head_node_address, import_ray, ray_node_targets
from otel_bridge.discovery.ray_service_discovery import (
    SERVICE_DISCOVERY_FILE,
    ServiceDiscoveryFileError,
    TargetGroup,
    find_service_discovery_file,
    parse_service_discovery,
    ray_service_discovery_path,
    ray_service_discovery_targets,
    read_service_discovery_file,
)
from otel_bridge.discovery.targets import (
    MetricsAddressActor,
    RolloutServers,
    normalize_targets,
    rollout_targets,
    validate_target,
)
from otel_bridge.discovery.watcher import TargetWatcher

__all__ = [
    "DEFAULT_RAY_PROMETHEUS_PORT",
    "ENV_RAY_PROMETHEUS_HOST",
    "SERVICE_DISCOVERY_FILE",
    "MetricsAddressActor",
    "Resolution",
    "RolloutServers",
    "ServiceDiscoveryFileError",
    "TargetGroup",
    "TargetWatcher",
    "find_service_discovery_file",
    "head_node_address",
    "import_ray",
    "normalize_targets",
    "parse_service_discovery",
    "ray_node_targets",
    "ray_service_discovery_path",
    "ray_service_discovery_targets",
    "read_service_discovery_file",
    "resolve_prometheus_url",
    "rollout_targets",
    "validate_target",
]
