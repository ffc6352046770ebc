"""The scrape wing: window statistics read straight from ``/metrics`` endpoints (no Prometheus server needed).

The face: :class:`ScrapeProducer` (the sampler and one window at a time, in this process), :class:`ScrapeProcess` (the
same in a child process, ``scrape.isolation: process``, the default) and the :class:`Scraper` protocol both keep;
:class:`NodeAgents` (the same read by one Ray actor per node, ``scrape.readers: node_agents``, their partial
statistics merged here) and :class:`NodeAgent` (what each of those actors runs); :class:`WatchedScraper` (a scraper
with the watcher keeping its targets current, built and closed together: the discovered scrape targets and the PromQL
wing's boundary scrapes); :class:`MetricsEndpoint` (one
``/metrics`` URL read through the bridge's transport) and its :data:`ENDPOINT_DEFAULTS`. Everything under
``_internal`` is private: each target's readings and which one stands for a boundary (``readings``), the endpoint,
which node reads which target (``placement``), and the child process with the
frames between it and this process.
"""

from otel_bridge.producers.scrape._internal.endpoint import ENDPOINT_DEFAULTS, MetricsEndpoint
from otel_bridge.producers.scrape.agent import NodeAgent
from otel_bridge.producers.scrape.node_agents import NodeAgents
from otel_bridge.producers.scrape.process import ScrapeProcess, Scraper
from otel_bridge.producers.scrape.producer import ScrapeProducer
from otel_bridge.producers.scrape.watched import WatchedScraper

__all__ = [
    "ENDPOINT_DEFAULTS",
    "MetricsEndpoint",
    "NodeAgent",
    "NodeAgents",
    "ScrapeProcess",
    "ScrapeProducer",
    "Scraper",
    "WatchedScraper",
]
