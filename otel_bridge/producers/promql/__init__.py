"""The PromQL wing: window statistics read from a Prometheus-compatible store's HTTP API (the requests of a step:
docs/architecture.md, One step).

- :mod:`~otel_bridge.producers.promql.producer`: :class:`PromQLProducer`, one window at a time;
- :mod:`~otel_bridge.producers.promql.plan`: one window's query, in parts under a store's query-length limit, and how
  to read its answer;
- :mod:`~otel_bridge.producers.promql.store`: which store it is and what it can do, detected once at start-up;
- :mod:`~otel_bridge.producers.promql.rules`: otel-bridge's recording rules, and whether Prometheus runs them;
- :mod:`~otel_bridge.producers.promql.checks`: start-up checks of the configured metrics against Prometheus;
- :mod:`~otel_bridge.producers.promql.targets`: Prometheus' targets serving the metrics, and their schedule;
- :mod:`~otel_bridge.producers.promql.connect`: a client for the ``prometheus`` config section.
"""

from otel_bridge.producers.promql.connect import client_for, connect
from otel_bridge.producers.promql.producer import PromQLProducer

__all__ = ["PromQLProducer", "client_for", "connect"]
