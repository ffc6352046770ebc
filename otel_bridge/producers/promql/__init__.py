"""The PromQL wing: window statistics read from a Prometheus-compatible store's HTTP API (docs/architecture.md, One
step, and The PromQL wing).

The face: :class:`PromQLProducer` (in this process) and :class:`PromQLProcess` (the same in a child process,
``prometheus.isolation: process``, the default); a client for the ``prometheus`` config section (:func:`connect`,
:func:`client_for`); which store it is (:class:`Store`, :func:`detect_store`); otel-bridge's recording rules
(:func:`rule_for`, :func:`rules_document`, :func:`find_rules`, :func:`counting`, :data:`PRESENT`); the start-up check
of configured names (:func:`check_names`) and the form the store holds each family under (:func:`find_forms`); the
store's exact increase cross-checked against its samples
(:func:`cross_check_window`). Everything under ``_internal`` is private.
"""

from otel_bridge.producers.promql._internal.checks import check_names
from otel_bridge.producers.promql._internal.connect import client_for, connect
from otel_bridge.producers.promql._internal.rules import PRESENT, counting, find_rules, rule_for, rules_document
from otel_bridge.producers.promql._internal.sources.exact_increase import cross_check_window
from otel_bridge.producers.promql._internal.store import Store, detect_store
from otel_bridge.producers.promql._internal.stored_names import find_forms
from otel_bridge.producers.promql.process import PromQLProcess
from otel_bridge.producers.promql.producer import PromQLProducer

__all__ = [
    "PRESENT",
    "PromQLProcess",
    "PromQLProducer",
    "Store",
    "check_names",
    "client_for",
    "connect",
    "counting",
    "cross_check_window",
    "detect_store",
    "find_forms",
    "find_rules",
    "rule_for",
    "rules_document",
]
