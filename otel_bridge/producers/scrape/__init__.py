"""The scrape wing: window statistics read straight from ``/metrics`` endpoints (no Prometheus server needed).

- :mod:`~otel_bridge.producers.scrape.producer`: :class:`ScrapeProducer`, the sampler and one window at a time;
- :mod:`~otel_bridge.producers.scrape.readings`: each target's readings, and which one stands for a step boundary;
- :mod:`~otel_bridge.producers.scrape.endpoint`: reading one ``/metrics`` URL through the bridge's transport;
- the child process (``scrape.isolation: process``, the default): :mod:`~otel_bridge.producers.scrape.process` in the
  trainer's process, :mod:`~otel_bridge.producers.scrape.child` in the child,
  :mod:`~otel_bridge.producers.scrape.frames` between them.
"""

from otel_bridge.producers.scrape.process import ScrapeProcess, Scraper
from otel_bridge.producers.scrape.producer import ScrapeProducer

__all__ = ["ScrapeProcess", "ScrapeProducer", "Scraper"]
