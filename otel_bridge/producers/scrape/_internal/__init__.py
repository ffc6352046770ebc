"""The scrape wing's insides: private to :mod:`otel_bridge.producers.scrape` (its face names what others may use).

docs/architecture.md ("The scrape wing") says why each room exists.
"""
