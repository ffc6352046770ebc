"""bench/backfill.py: the PromQL-scaling data set holds each series of the capture once.

The ``vllm`` preset names ``vllm:num_requests_running`` twice (its ``last``/``max`` and its ``:servers`` alias for
``idle_seconds``); the generator took the capture's series once per name, so every replica's history of that gauge was
written twice into one OpenMetrics file and ``promtool tsdb create-blocks-from openmetrics`` refused it ("out of
order sample"), ending the suite at any replica count.
"""

from __future__ import annotations

from collections import Counter

from bench.backfill import capture_series


def test_the_data_set_holds_each_series_of_the_capture_once() -> None:
    series = Counter((s.name, tuple(sorted(s.labels.items()))) for s in capture_series())
    assert [key for key, count in series.items() if count > 1] == []
