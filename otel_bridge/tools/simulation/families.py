"""The metric families a simulated engine exposes, read from a table in the package data (``data/*.json``: generated
from a real capture, see each table's ``comment``), and created as prometheus_client metrics."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from types import MappingProxyType
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric


@dataclass(frozen=True, slots=True)
class FamilySpec:
    """One family as the engine exposes it.

    ``name`` is the ``# TYPE`` name (counters with ``_total``). ``fixed_labels`` maps each label other than the
    simulator's own (``engine``/``model_name``...) to its values in the engine's creation order; ``constant_labels``
    are the single-valued labels of an info gauge (``vllm:cache_config_info``); ``buckets`` are the finite histogram
    bounds (``+Inf`` implied); ``multiprocess_mode`` is a gauge's in prometheus_client's multiprocess mode (``all``,
    its default, keeps one series per process under a ``pid`` label).
    """

    name: str
    kind: str
    help: str
    labelnames: tuple[str, ...]
    fixed_labels: Mapping[str, tuple[str, ...]]
    constant_labels: Mapping[str, str]
    buckets: tuple[float, ...]
    multiprocess_mode: str = "all"


def family_specs(resource: str) -> tuple[FamilySpec, ...]:
    """The families of table ``resource`` (a path under ``otel_bridge/tools/simulation``), in exposition order."""
    table = json.loads(resources.files("otel_bridge.tools.simulation").joinpath(resource).read_text(encoding="utf-8"))
    return tuple(
        FamilySpec(
            name=entry["name"],
            kind=entry["type"],
            help=entry["help"],
            labelnames=tuple(entry["labelnames"]),
            fixed_labels=MappingProxyType({k: tuple(v) for k, v in entry.get("fixed_labels", {}).items()}),
            constant_labels=MappingProxyType(dict(entry.get("constant_labels", {}))),
            buckets=tuple(entry.get("buckets", ())),
            multiprocess_mode=entry.get("multiprocess_mode", "all"),
        )
        for entry in table["families"]
    )


def create_metric(spec: FamilySpec, registry: CollectorRegistry, gauge_modes: Mapping[str, str]) -> Any:
    """``spec`` as a prometheus_client metric in ``registry`` (``gauge_modes`` overrides a gauge's multiprocess
    mode by name)."""
    if spec.kind == "counter":
        return Counter(spec.name, spec.help, spec.labelnames, registry=registry)
    if spec.kind == "gauge":
        mode = gauge_modes.get(spec.name, spec.multiprocess_mode)
        return Gauge(spec.name, spec.help, spec.labelnames, registry=registry, multiprocess_mode=mode)
    if spec.kind == "histogram":
        return Histogram(spec.name, spec.help, spec.labelnames, buckets=spec.buckets, registry=registry)
    raise ValueError(f"metric table entry {spec.name!r} has unsupported type {spec.kind!r}")


def cumulative_totals(families: Iterable[Metric], prefix: str) -> dict[str, float]:
    """Every counter's ``_total`` and every histogram's ``_count`` and ``_sum`` among the families named
    ``prefix...``, summed over label values and keyed by sample name: what a test's truth compares against."""
    totals: dict[str, float] = {}
    for family in families:
        if not family.name.startswith(prefix) or family.type not in ("counter", "histogram"):
            continue
        for sample in family.samples:
            if sample.name.endswith(("_total", "_count", "_sum")):
                totals[sample.name] = totals.get(sample.name, 0.0) + float(sample.value)
    return totals
