"""Metric sets shared by the integration tests and the benchmarks (no pytest import, so bench/ can use it)."""

from __future__ import annotations

from typing import Any

# 20 vLLM metrics: 8 counters, 4 gauges, 8 histograms (the "20 configured metrics" of the request-count checks).
TWENTY_METRICS: list[dict[str, Any]] = [
    *({"name": f"vllm:{n}_total", "type": "counter"} for n in (
        "generation_tokens", "prompt_tokens", "request_success", "num_preemptions",
        "prefix_cache_hits", "prefix_cache_queries", "prompt_tokens_cached", "estimated_flops_per_gpu",
    )),
    *({"name": f"vllm:{n}", "type": "gauge"} for n in (
        "num_requests_running", "num_requests_waiting", "kv_cache_usage_perc", "engine_sleep_state",
    )),
    *({"name": f"vllm:{n}", "type": "histogram"} for n in (
        "time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds",
        "request_queue_time_seconds", "request_prefill_time_seconds", "request_decode_time_seconds",
        "request_inference_time_seconds", "request_prompt_tokens",
    )),
]  # fmt: skip
