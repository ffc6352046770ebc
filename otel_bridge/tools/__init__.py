"""Tools around a run, never imported by one: only the command line (:mod:`otel_bridge.cli`) imports them.

- :mod:`~otel_bridge.tools.demo`: the demo run (``otel-bridge demo``);
- :mod:`~otel_bridge.tools.simulation`: simulated vLLM rollout servers
  (``python -m otel_bridge.tools.simulation.vllm``);
- :mod:`~otel_bridge.tools.local_prometheus`: a real Prometheus started for the demo and the tests;
- :mod:`~otel_bridge.tools.prometheus_files`: Prometheus' own files written for a config: its scrape config, the
  recording-rule file, file-discovery targets (``otel-bridge prometheus-config`` and ``prometheus-rules``).

:func:`run_demo` is imported when first used: the demo imports the simulated servers, which also run as
``python -m otel_bridge.tools.simulation.vllm`` and must not be imported before that runs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from otel_bridge.tools.local_prometheus import LocalPrometheus, find_prometheus_binary
from otel_bridge.tools.prometheus_files import prometheus_config, write_prometheus_config, write_rule_file

if TYPE_CHECKING:
    from otel_bridge.tools.demo import run_demo

__all__ = [
    "LocalPrometheus",
    "find_prometheus_binary",
    "prometheus_config",
    "run_demo",
    "write_prometheus_config",
    "write_rule_file",
]


def __getattr__(name: str) -> Any:
    if name == "run_demo":
        from otel_bridge.tools.demo import run_demo

        return run_demo
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
