"""otel-bridge: infrastructure and trainer metrics in your experiment tracker, one record per training step.

Public API: :class:`Bridge` and :func:`install`, :class:`BridgeConfig`, :class:`StepWindow`, :class:`StepRecord` and
:class:`DeliveryReport`, :class:`TrackerExporter`, :class:`MetricProducer`, the producers, and the typed errors.
Everything else is imported from the face (``__all__``) of the package that holds it (``otel_bridge.exporters.backends``
for plugin backends, ``otel_bridge.producers``, ``otel_bridge.config``...), never from the modules inside it;
docs/architecture.md maps the house.
"""

from otel_bridge.bridge import Bridge, install
from otel_bridge.config import BridgeConfig
from otel_bridge.errors import (
    BackendError,
    BridgeClosedError,
    ConfigError,
    DeliveryTimeoutError,
    DiscoveryError,
    ExpositionParseError,
    InvalidPhaseError,
    InvalidStepError,
    OtelBridgeError,
    PrometheusAPIError,
    PrometheusError,
    PrometheusResponseError,
    PrometheusUnreachableError,
    QueryTooLongError,
    RedactedCauseError,
    ReservedKeyError,
    ResponseTooLargeError,
    SampleLimitError,
    ScrapeError,
    SourceError,
    StepOrderError,
    TrainingThreadError,
)
from otel_bridge.exporters import DeliveryReport, StepRecord, TrackerExporter
from otel_bridge.producers import MetricProducer, PromQLProducer, ScrapeProducer
from otel_bridge.window import StepWindow

__version__ = "0.1.0"

__all__ = [
    "BackendError",
    "Bridge",
    "BridgeClosedError",
    "BridgeConfig",
    "ConfigError",
    "DeliveryReport",
    "DeliveryTimeoutError",
    "DiscoveryError",
    "ExpositionParseError",
    "InvalidPhaseError",
    "InvalidStepError",
    "MetricProducer",
    "OtelBridgeError",
    "PromQLProducer",
    "PrometheusAPIError",
    "PrometheusError",
    "PrometheusResponseError",
    "PrometheusUnreachableError",
    "QueryTooLongError",
    "RedactedCauseError",
    "ReservedKeyError",
    "ResponseTooLargeError",
    "SampleLimitError",
    "ScrapeError",
    "ScrapeProducer",
    "SourceError",
    "StepOrderError",
    "StepRecord",
    "StepWindow",
    "TrackerExporter",
    "TrainingThreadError",
    "__version__",
    "install",
]
