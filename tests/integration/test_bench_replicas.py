"""The node-agents benchmark's measuring parts (bench/suite_node_agents.py): the simulated replicas serve the counts
its truth is computed from, and the PromQL arm's counting proxy counts every answer the PromQL path gets.

- :mod:`bench.replica_server` (a real process on loopback ports): each replica's moving counters, read over HTTP, lie
  between :func:`bench.replica_server.requests_done` just before the request and just after the answer, and the
  served pages and bytes are counted on its counting port.
- :func:`bench.suite_promql_scale._count` (what the counting proxy reports per answer) takes a scalar answer (the
  PromQL path's clock-offset check asks ``time()``) as one sample; it raised ``TypeError`` on it, which ended the
  proxy's stats request and the benchmark.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from bench.replica_server import GENERATION_TOKENS, requests_done
from bench.suite_node_agents import replica_server
from bench.suite_promql_scale import _count
from otel_bridge.prometheus import parse_exposition

pytestmark = pytest.mark.integration


def test_each_replica_serves_the_counts_its_truth_says_at_the_moment_it_answers() -> None:
    with replica_server(2) as replicas:
        for index, target in enumerate(replicas.targets):
            for _ in range(3):
                before = time.time()
                with urllib.request.urlopen(f"http://{target}/metrics", timeout=10) as answer:
                    text = answer.read().decode()
                after = time.time()
                families = parse_exposition(text, {"vllm:request_success_total", "vllm:generation_tokens_total"})
                served = {
                    s.labels.get("finished_reason"): s.value for s in families["vllm:request_success_total"].samples
                }
                tokens = families["vllm:generation_tokens_total"].samples[0].value
                low, high = requests_done(index, before, replicas.t0), requests_done(index, after, replicas.t0)
                assert low <= served["length"] - 100 <= high
                assert tokens - 100 == (served["length"] - 100) * GENERATION_TOKENS
                time.sleep(0.3)  # the counters move with the clock
        counted = replicas.served()
    assert counted["pages"] == 6
    assert counted["bytes"] > 6 * 49_000


def test_the_counting_proxy_counts_a_scalar_answer_as_one_sample() -> None:
    body = json.dumps({"status": "success", "data": {"resultType": "scalar", "result": [1796230000.1, "1796230000.1"]}})
    record = _count({"body": body.encode(), "encoding": "identity"})
    assert (record["result_type"], record["series"], record["samples"]) == ("scalar", 0, 1)
