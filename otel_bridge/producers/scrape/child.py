"""The scrape path's child process (``python -m otel_bridge.producers.scrape.child``): a
:class:`~otel_bridge.producers.scrape.ScrapeProducer` served to its
:class:`~otel_bridge.producers.scrape.ScrapeProcess` by :func:`otel_bridge.producers.isolation.serve`."""

from __future__ import annotations

from otel_bridge.producers.isolation import serve
from otel_bridge.producers.scrape.producer import ScrapeProducer

if __name__ == "__main__":
    serve(ScrapeProducer, "the scrape process")
