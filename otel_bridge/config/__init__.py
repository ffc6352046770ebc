"""The one configuration: a validated model of ``otel-bridge.yaml`` and where its values come from.

- :mod:`otel_bridge.config.model`: every section (:class:`BridgeConfig` and its parts), one base model;
- :mod:`otel_bridge.config.load`: YAML files, ``OTEL_BRIDGE__...`` environment overrides, secrets from environment
  variables or files;
- :mod:`otel_bridge.config.messages`: validation errors as users read them (also used for the trackers' options).

The bottom of the house: nothing here imports a part of otel_bridge that sits above it (README: Configuration).
"""

from otel_bridge.config.load import (
    AUTO,
    ENV_CONFIG_FILE,
    ENV_PREFIX,
    ENV_PROMETHEUS_URL,
    apply_env_overrides,
    open_regular_file,
    read_yaml,
)
from otel_bridge.config.messages import format_validation_error
from otel_bridge.config.model import (
    DEFAULT_MAX_GROUPS,
    PRESET_NAMES,
    AuthConfig,
    BoundaryMode,
    BridgeConfig,
    DeliveryConfig,
    MetricConfig,
    NamingConfig,
    OTelConfig,
    OTLPConfig,
    OTLPInstrumentConfig,
    PrometheusConfig,
    PrometheusEndpointConfig,
    RatioConfig,
    Readers,
    RulesMode,
    RunConfig,
    ScrapeConfig,
    ScrapeReaders,
    TLSConfig,
    TrackerConfig,
)

__all__ = [
    "AUTO",
    "DEFAULT_MAX_GROUPS",
    "ENV_CONFIG_FILE",
    "ENV_PREFIX",
    "ENV_PROMETHEUS_URL",
    "PRESET_NAMES",
    "AuthConfig",
    "BoundaryMode",
    "BridgeConfig",
    "DeliveryConfig",
    "MetricConfig",
    "NamingConfig",
    "OTLPConfig",
    "OTLPInstrumentConfig",
    "OTelConfig",
    "PrometheusConfig",
    "PrometheusEndpointConfig",
    "RatioConfig",
    "Readers",
    "RulesMode",
    "RunConfig",
    "ScrapeConfig",
    "ScrapeReaders",
    "TLSConfig",
    "TrackerConfig",
    "apply_env_overrides",
    "format_validation_error",
    "open_regular_file",
    "read_yaml",
]
