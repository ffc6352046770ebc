"""The PromQL wing's insides: private to :mod:`otel_bridge.producers.promql` (its face names what others may use).

docs/architecture.md ("The PromQL wing") says why each room exists.
"""
