"""Simulated rollout servers and GPUs for the demo and for tests: vLLM's (one process or data-parallel), SGLang's,
dcgm-exporter's and Ray's exact ``/metrics`` driven by a known script, served the way each real exporter serves it.

Names are imported lazily so that ``python -m otel_bridge.tools.simulation.vllm`` does not import its own module twice.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from otel_bridge.tools.simulation.data_parallel import DataParallelVLLM
    from otel_bridge.tools.simulation.families import FamilySpec
    from otel_bridge.tools.simulation.gpus import GPUFleet, GPUTruth
    from otel_bridge.tools.simulation.http import MetricsHTTPServer
    from otel_bridge.tools.simulation.sglang import SGLangSimulator
    from otel_bridge.tools.simulation.vllm import (
        EngineAsleepError,
        SimulatedWorkload,
        VLLMServer,
        VLLMSimulator,
        vllm_family_specs,
    )

__all__ = [
    "DataParallelVLLM",
    "EngineAsleepError",
    "FamilySpec",
    "GPUFleet",
    "GPUTruth",
    "MetricsHTTPServer",
    "SGLangSimulator",
    "SimulatedWorkload",
    "VLLMServer",
    "VLLMSimulator",
    "vllm_family_specs",
]

_MODULES = {
    "EngineAsleepError": "otel_bridge.tools.simulation.vllm",
    "GPUFleet": "otel_bridge.tools.simulation.gpus",
    "GPUTruth": "otel_bridge.tools.simulation.gpus",
    "MetricsHTTPServer": "otel_bridge.tools.simulation.http",
    "SimulatedWorkload": "otel_bridge.tools.simulation.vllm",
    "DataParallelVLLM": "otel_bridge.tools.simulation.data_parallel",
    "FamilySpec": "otel_bridge.tools.simulation.families",
    "SGLangSimulator": "otel_bridge.tools.simulation.sglang",
    "VLLMServer": "otel_bridge.tools.simulation.vllm",
    "VLLMSimulator": "otel_bridge.tools.simulation.vllm",
    "vllm_family_specs": "otel_bridge.tools.simulation.vllm",
}


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_MODULES[name]), name)
