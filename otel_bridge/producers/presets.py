"""Named metric sets with the right statistics, usable as ``- preset: vllm`` in config.

Each preset is a list of :class:`~otel_bridge.config.MetricConfig`-shaped dicts; an entry's own ``by`` labels are kept
in front of those the user gives the preset. Gauges combine across series with one aggregation each: where both the
average over GPUs and the highest GPU matter, the preset lists the metric twice, the second under an alias ending in
``:busiest_gpu``. Deprecated vLLM names are mapped to their replacements by :data:`DEPRECATED` (accepted with a
warning, queried as the replacement).
"""

from __future__ import annotations

from typing import Any, Final

from otel_bridge.config import PRESET_NAMES


def _mean_and_busiest_gpu(name: str, full_scale: float) -> list[dict[str, Any]]:
    """A per-GPU utilization gauge twice: its mean over the step and the GPUs, and the highest value any GPU reached;
    a GPU's values outside ``[0, full_scale]`` leave it out of the step (``metrics[].full_scale``)."""
    return [
        {"name": name, "type": "gauge", "stats": ["mean"], "agg": "mean", "full_scale": full_scale},
        {
            "name": name,
            "type": "gauge",
            "stats": ["max"],
            "agg": "max",
            "full_scale": full_scale,
            "alias": f"{name}:busiest_gpu",
        },
    ]


def _idle_gpu_seconds(name: str, full_scale: float) -> dict[str, Any]:
    """A per-GPU utilization gauge as the GPU-seconds its GPUs were idle during the window, summed over the GPUs."""
    return {
        "name": name,
        "type": "gauge",
        "stats": ["idle_seconds"],
        "agg": "sum",
        "full_scale": full_scale,
        "alias": f"{name}:gpus",
    }


VLLM: Final[list[dict[str, Any]]] = [
    {"name": "vllm:generation_tokens_total", "type": "counter", "stats": ["delta", "rate"]},
    {"name": "vllm:prompt_tokens_total", "type": "counter", "stats": ["delta", "rate"]},
    {"name": "vllm:request_success_total", "type": "counter", "stats": ["delta"]},
    {"name": "vllm:num_preemptions_total", "type": "counter", "stats": ["delta"]},
    {"name": "vllm:num_requests_running", "type": "gauge", "stats": ["last", "max"], "agg": "sum"},
    {"name": "vllm:num_requests_waiting", "type": "gauge", "stats": ["last", "max"], "agg": "sum"},
    {"name": "vllm:kv_cache_usage_perc", "type": "gauge", "stats": ["max", "mean"], "agg": "max"},
    # The seconds each server ran no request, summed over the servers (busy_at 1: a server is busy while it runs at
    # least one request): idle server-seconds, read beside idle GPU-seconds (docs/step-numbers.md).
    {
        "name": "vllm:num_requests_running",
        "type": "gauge",
        "stats": ["idle_seconds"],
        "agg": "sum",
        "busy_at": 1.0,
        "alias": "vllm:num_requests_running:servers",
    },
    # vLLM's sleep mode, one series per sleep_state (awake, weights_offloaded: level 1, discard_all: level 2), each 1
    # while the engine is in it (vllm/v1/metrics/loggers.py record_sleep_state): summed over the servers, the min is
    # how many servers were in that state at every sample of the window, the max how many at some sample.
    {"name": "vllm:engine_sleep_state", "type": "gauge", "stats": ["min", "max"], "agg": "sum", "by": ["sleep_state"]},
    {
        "ratio": {
            "numerator": "vllm:prefix_cache_hits_total",
            "denominator": "vllm:prefix_cache_queries_total",
        },
        "alias": "vllm:prefix_cache_hit_rate",
    },
    {
        "name": "vllm:time_to_first_token_seconds",
        "type": "histogram",
        "stats": ["mean", "p50", "p99", "count"],
    },
    {"name": "vllm:inter_token_latency_seconds", "type": "histogram", "stats": ["mean", "p50", "p99"]},
    {"name": "vllm:e2e_request_latency_seconds", "type": "histogram", "stats": ["mean", "p50", "p99"]},
    {"name": "vllm:request_queue_time_seconds", "type": "histogram", "stats": ["mean", "p99"]},
]

# SGLang 0.5.23 (python/sglang/srt/observability/metrics_collector.py of the released wheel; names, types and labels
# checked there, tests/fixtures/sglang/README.md). Scheduler gauges carry model_name, engine_type, tp_rank, pp_rank,
# moe_ep_rank (+ dp_rank, priority when enabled); the tokenizer's counters and histograms carry model_name,
# engine_type and mostly is_streaming. sglang:time_per_output_token_seconds (named in older docs) does not exist: the
# per-token latency is sglang:inter_token_latency_seconds.
SGLANG: Final[list[dict[str, Any]]] = [
    {"name": "sglang:generation_tokens_total", "type": "counter", "stats": ["delta", "rate"]},
    {"name": "sglang:prompt_tokens_total", "type": "counter", "stats": ["delta", "rate"]},
    {"name": "sglang:num_requests_total", "type": "counter", "stats": ["delta"]},
    {"name": "sglang:num_running_reqs", "type": "gauge", "stats": ["last", "max"], "agg": "sum"},
    {"name": "sglang:num_queue_reqs", "type": "gauge", "stats": ["last", "max"], "agg": "sum"},
    {"name": "sglang:num_used_tokens", "type": "gauge", "stats": ["max"], "agg": "sum"},
    {"name": "sglang:token_usage", "type": "gauge", "stats": ["max", "mean"], "agg": "max"},
    {"name": "sglang:cache_hit_rate", "type": "gauge", "stats": ["mean"], "agg": "mean"},
    {"name": "sglang:time_to_first_token_seconds", "type": "histogram", "stats": ["mean", "p50", "p99", "count"]},
    {"name": "sglang:inter_token_latency_seconds", "type": "histogram", "stats": ["mean", "p50", "p99"]},
    {"name": "sglang:e2e_request_latency_seconds", "type": "histogram", "stats": ["mean", "p50", "p99"]},
]

# Ray 2.60's metrics agent (ray/dashboard/modules/reporter/reporter_agent.py METRICS_GAUGES, checked against a capture
# of a real Ray 2.60 node). Node gauges carry ip, Version, SessionName, IsHeadNode, RayNodeType; GPU gauges add
# GpuIndex, GpuDeviceName, GpuUuid and exist only on nodes with GPUs. ray_node_gram_used is in MiB (Ray divides
# NVML's bytes by 2**20) despite its "bytes" unit. ray_object_store_used_memory is one series per node (labelled
# NodeAddress); ray_object_store_memory would add spilled and worker-heap bytes to shared memory.
RAY: Final[list[dict[str, Any]]] = [
    {"name": "ray_node_cpu_utilization", "type": "gauge", "stats": ["mean", "max"], "agg": "mean"},
    {"name": "ray_node_mem_used", "type": "gauge", "stats": ["max"], "agg": "sum"},
    {"name": "ray_node_mem_total", "type": "gauge", "stats": ["last"], "agg": "sum"},
    *_mean_and_busiest_gpu("ray_node_gpus_utilization", 100.0),
    # One series per GPU (GpuIndex) since Ray 2.x's GPU_TAG_KEYS, each 0..100; Ray releases that labelled it by ip
    # alone summed a node's GPUs (0..GPUs x 100), which this idle figure would misread.
    _idle_gpu_seconds("ray_node_gpus_utilization", 100.0),
    {"name": "ray_node_gram_used", "type": "gauge", "stats": ["max"], "agg": "max"},
    {"name": "ray_object_store_used_memory", "type": "gauge", "stats": ["max"], "agg": "sum"},
    {"name": "ray_node_network_receive_speed", "type": "gauge", "stats": ["mean"], "agg": "sum"},
    {"name": "ray_node_network_send_speed", "type": "gauge", "stats": ["mean"], "agg": "sum"},
]

# NVIDIA dcgm-exporter 4.5.3-4.8.2 (tag commit 691c9276) with its default counters (etc/default-counters.csv). One
# series per GPU, labelled gpu, UUID, pci_bus_id, device, modelName, Hostname (the exporter's host; "hostname" on
# dcgm-exporter's main branch after 4.5.3-4.8.2), DCGM_FI_DRIVER_VERSION, plus pod/namespace/container for GPUs
# allocated to pods.
# The DCGM_FI_PROF_* fields need a GPU with profiling metrics (data-centre parts); DCGM_FI_PROF_SM_ACTIVE is not
# among the default counters (add it to the exporter's CSV and configure it by name).
# etc/default-counters.csv: DCGM_FI_DEV_GPU_UTIL "GPU utilization (in %)", DCGM_FI_DEV_FB_USED "(in MiB)",
# DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION a counter, "Total energy consumption since boot (in mJ)": reported in joules
# (scale 0.001). DCGM_FI_DEV_GPU_UTIL:gpus/idle_seconds is the GPU-seconds the GPUs were idle (docs/gpu-time.md).
DCGM: Final[list[dict[str, Any]]] = [
    *_mean_and_busiest_gpu("DCGM_FI_DEV_GPU_UTIL", 100.0),
    _idle_gpu_seconds("DCGM_FI_DEV_GPU_UTIL", 100.0),
    {"name": "DCGM_FI_DEV_FB_USED", "type": "gauge", "stats": ["max"], "agg": "max"},
    {"name": "DCGM_FI_DEV_FB_FREE", "type": "gauge", "stats": ["min"], "agg": "min"},
    {"name": "DCGM_FI_DEV_POWER_USAGE", "type": "gauge", "stats": ["mean"], "agg": "sum"},
    {
        "name": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "type": "counter",
        "stats": ["delta"],
        "scale": 0.001,
        "alias": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION:joules",
    },
    {"name": "DCGM_FI_DEV_GPU_TEMP", "type": "gauge", "stats": ["max"], "agg": "max"},
    {"name": "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "type": "gauge", "stats": ["mean"], "agg": "mean", "full_scale": 1.0},
    {"name": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "type": "gauge", "stats": ["mean"], "agg": "mean", "full_scale": 1.0},
    {"name": "DCGM_FI_PROF_DRAM_ACTIVE", "type": "gauge", "stats": ["mean"], "agg": "mean", "full_scale": 1.0},
]

# AMD's device-metrics-exporter (ROCm/device-metrics-exporter, docs/configuration/metricslist.md): one series per GPU,
# GPU_GFX_ACTIVITY "Graphics engine usage percentage (0 - 100)", GPU_POWER_USAGE in Watts, GPU_ENERGY_CONSUMED
# "Accumulated energy consumed by the GPU in Micro Jules (uJ)" (read as a counter, reported in joules: scale 1e-6),
# GPU_USED_VRAM "Total VRAM memory used in MB"; exposed in Prometheus under the lower-case names.
AMD: Final[list[dict[str, Any]]] = [
    *_mean_and_busiest_gpu("gpu_gfx_activity", 100.0),
    _idle_gpu_seconds("gpu_gfx_activity", 100.0),
    {"name": "gpu_used_vram", "type": "gauge", "stats": ["max"], "agg": "max"},
    {"name": "gpu_power_usage", "type": "gauge", "stats": ["mean"], "agg": "sum"},
    {
        "name": "gpu_energy_consumed",
        "type": "counter",
        "stats": ["delta"],
        "scale": 1e-6,
        "alias": "gpu_energy_consumed:joules",
    },
]

# Prometheus node_exporter (checked against a capture of node_exporter 1.5.0; the names are unchanged in 1.x).
# node_cpu_seconds_total is kept apart by mode: its rate is the number of cores busy in each mode. The network and
# disk counters are summed over every device, the loopback interface included (add `by: [device]` to split them).
NODE: Final[list[dict[str, Any]]] = [
    {"name": "node_cpu_seconds_total", "type": "counter", "stats": ["rate"], "by": ["mode"]},
    {"name": "node_load1", "type": "gauge", "stats": ["max"], "agg": "max"},
    {"name": "node_memory_MemAvailable_bytes", "type": "gauge", "stats": ["min"], "agg": "sum"},
    {"name": "node_memory_MemTotal_bytes", "type": "gauge", "stats": ["last"], "agg": "sum"},
    {"name": "node_network_receive_bytes_total", "type": "counter", "stats": ["delta", "rate"]},
    {"name": "node_network_transmit_bytes_total", "type": "counter", "stats": ["delta", "rate"]},
    {"name": "node_disk_read_bytes_total", "type": "counter", "stats": ["delta", "rate"]},
    {"name": "node_disk_written_bytes_total", "type": "counter", "stats": ["delta", "rate"]},
]

PRESETS: Final[dict[str, list[dict[str, Any]]]] = dict(
    zip(PRESET_NAMES, (VLLM, SGLANG, RAY, DCGM, AMD, NODE), strict=True)
)
"""Preset name (:data:`~otel_bridge.config.PRESET_NAMES`, the one list of them) -> its metrics."""

MODEL_LABELS: Final[dict[str, str]] = {"vllm": "model_name", "sglang": "model_name"}
"""Preset -> the label its metrics name the served model by (vLLM's and SGLang's ``model_name``); presets of node or
GPU metrics have none."""

# Old vLLM names (gone in vLLM 0.32) -> the metric that replaces them. Accepted with a warning naming the
# replacement, and queried as the replacement. Checked against vLLM's own deprecation notes: the released 0.11.0
# vllm/v1/metrics/loggers.py marks gpu_cache_usage_perc, gpu_prefix_cache_queries/_hits ("Deprecated in 0.9.2 -
# Renamed as ...") and time_per_output_token_seconds ("Deprecated in 0.11 - Renamed as inter_token_latency_seconds");
# docs/design/metrics.md (commit 0328b592) names time_in_queue_requests a duplicate of request_queue_time_seconds and
# the hit-rate gauge replaced by the queries/hits counters; 0.32.0's loggers.py defines none of the old names.
# vllm:num_requests_swapped, vllm:cpu_cache_usage_perc and vllm:cpu_prefix_cache_hit_rate were removed without a
# replacement (no CPU swapping in the V1 engine): configured, they are reported missing by name. The avg_*_throughput
# gauges were removed (vLLM PR #12383) without a named replacement: their rate is the token counters' rate.
DEPRECATED: Final[dict[str, dict[str, Any]]] = {
    "vllm:gpu_cache_usage_perc": {"name": "vllm:kv_cache_usage_perc", "type": "gauge"},
    "vllm:gpu_prefix_cache_hits": {"name": "vllm:prefix_cache_hits_total", "type": "counter"},
    "vllm:gpu_prefix_cache_hits_total": {"name": "vllm:prefix_cache_hits_total", "type": "counter"},
    "vllm:gpu_prefix_cache_queries": {"name": "vllm:prefix_cache_queries_total", "type": "counter"},
    "vllm:gpu_prefix_cache_queries_total": {"name": "vllm:prefix_cache_queries_total", "type": "counter"},
    "vllm:gpu_prefix_cache_hit_rate": {
        "ratio": {
            "numerator": "vllm:prefix_cache_hits_total",
            "denominator": "vllm:prefix_cache_queries_total",
        },
        "alias": "vllm:prefix_cache_hit_rate",
    },
    "vllm:time_per_output_token_seconds": {"name": "vllm:inter_token_latency_seconds", "type": "histogram"},
    "vllm:time_in_queue_requests": {"name": "vllm:request_queue_time_seconds", "type": "histogram"},
    "vllm:avg_prompt_throughput_toks_per_s": {"name": "vllm:prompt_tokens_total", "type": "counter", "stats": ["rate"]},
    "vllm:avg_generation_throughput_toks_per_s": {
        "name": "vllm:generation_tokens_total",
        "type": "counter",
        "stats": ["rate"],
    },
}


def replacement_text(old: str) -> str:
    """How to name the replacement of a deprecated metric in a message."""
    new = DEPRECATED[old]
    if "ratio" in new:
        ratio = new["ratio"]
        return f"the ratio delta({ratio['numerator']}) / delta({ratio['denominator']}) (alias {new['alias']})"
    stats = new.get("stats")
    return str(new["name"]) + (f" with stats {stats}" if stats else "")
