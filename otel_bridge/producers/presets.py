"""Named metric sets with the right statistics, usable as ``- preset: vllm`` in config.

Each preset is a list of :class:`~otel_bridge.config.MetricConfig`-shaped dicts. Deprecated vLLM names are mapped to
their replacements by :data:`DEPRECATED` (accepted with a warning, queried as the replacement).
"""

from __future__ import annotations

from typing import Any, Final

VLLM: Final[list[dict[str, Any]]] = [
    {"name": "vllm:generation_tokens_total", "type": "counter", "stats": ["delta", "rate"]},
    {"name": "vllm:prompt_tokens_total", "type": "counter", "stats": ["delta", "rate"]},
    {"name": "vllm:request_success_total", "type": "counter", "stats": ["delta"]},
    {"name": "vllm:num_preemptions_total", "type": "counter", "stats": ["delta"]},
    {"name": "vllm:num_requests_running", "type": "gauge", "stats": ["last", "max"], "agg": "sum"},
    {"name": "vllm:num_requests_waiting", "type": "gauge", "stats": ["last", "max"], "agg": "sum"},
    {"name": "vllm:kv_cache_usage_perc", "type": "gauge", "stats": ["max", "mean"], "agg": "max"},
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

# Names as documented in SGLang's production metrics reference (docs/references/production_metrics.md).
SGLANG: Final[list[dict[str, Any]]] = [
    {"name": "sglang:generation_tokens_total", "type": "counter", "stats": ["delta", "rate"]},
    {"name": "sglang:prompt_tokens_total", "type": "counter", "stats": ["delta", "rate"]},
    {"name": "sglang:num_running_reqs", "type": "gauge", "stats": ["last", "max"], "agg": "sum"},
    {"name": "sglang:num_queue_reqs", "type": "gauge", "stats": ["last", "max"], "agg": "sum"},
    {"name": "sglang:num_used_tokens", "type": "gauge", "stats": ["max"], "agg": "sum"},
    {"name": "sglang:token_usage", "type": "gauge", "stats": ["max", "mean"], "agg": "max"},
    {"name": "sglang:cache_hit_rate", "type": "gauge", "stats": ["mean"], "agg": "mean"},
    {"name": "sglang:time_to_first_token_seconds", "type": "histogram", "stats": ["mean", "p50", "p99", "count"]},
    {"name": "sglang:time_per_output_token_seconds", "type": "histogram", "stats": ["mean", "p50", "p99"]},
    {"name": "sglang:e2e_request_latency_seconds", "type": "histogram", "stats": ["mean", "p50", "p99"]},
]

# Ray's node and object-store metrics as its metrics agent exports them (ray_ prefix).
RAY: Final[list[dict[str, Any]]] = [
    {"name": "ray_node_cpu_utilization", "type": "gauge", "stats": ["mean", "max"], "agg": "mean"},
    {"name": "ray_node_mem_used", "type": "gauge", "stats": ["max"], "agg": "sum"},
    {"name": "ray_node_mem_total", "type": "gauge", "stats": ["last"], "agg": "sum"},
    {"name": "ray_node_gpus_utilization", "type": "gauge", "stats": ["mean", "max"], "agg": "mean"},
    {"name": "ray_node_gram_used", "type": "gauge", "stats": ["max"], "agg": "sum"},
    {"name": "ray_object_store_memory", "type": "gauge", "stats": ["max"], "agg": "sum"},
]

PRESETS: Final[dict[str, list[dict[str, Any]]]] = {"vllm": VLLM, "sglang": SGLANG, "ray": RAY}

# Old vLLM names (gone in vLLM 0.32) -> the metric that replaces them. Accepted with a warning naming the
# replacement, and queried as the replacement.
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
