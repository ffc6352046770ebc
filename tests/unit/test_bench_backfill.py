"""bench/backfill.py: the PromQL-scaling data set and its truth follow the ``vllm`` preset.

The ``vllm`` preset names ``vllm:num_requests_running`` twice (its ``last``/``max`` and its ``:servers`` alias for
``idle_seconds``); the generator took the capture's series once per name, so every replica's history of that gauge was
written twice into one OpenMetrics file and ``promtool tsdb create-blocks-from openmetrics`` refused it ("out of
order sample"), ending the suite at any replica count.

The truth once listed statistics by hand-picked ``name/stat`` keys: when the preset gained
``vllm:num_requests_running:servers/idle_seconds`` and ``vllm:engine_sleep_state`` min/max by ``sleep_state``, the
truth kept the old keys and the suite's exactness column fell to 0 steps without anything failing. The keys every
query of the preset yields for the generated data are derived here from the preset's resolved queries and the
generated series' labels, and each must have a computed value.
"""

from __future__ import annotations

import math
from collections import Counter

from bench.backfill import SLEEP_WINDOW, Layout, capture_series, preset_queries, replicas_of, truth, truth_key

_REPLICAS = 4


def test_the_data_set_holds_each_series_of_the_capture_once() -> None:
    series = Counter((s.name, tuple(sorted(s.labels.items()))) for s in capture_series())
    assert [key for key, count in series.items() if count > 1] == []


def _expected_keys() -> set[str]:
    """Every key the preset's queries yield for the generated series: one per statistic and ``by`` group."""
    series = capture_series()
    keys: set[str] = set()
    for query in preset_queries():
        if query.ratio is not None:
            keys.add(truth_key(query.key_name, None, {}))
            continue
        names = set(query.series_names())
        groups = {tuple((label, s.labels.get(label, "")) for label in query.by) for s in series if s.name in names}
        assert groups, f"the generated data has no series of {query.key_name}"
        keys |= {truth_key(query.key_name, stat, dict(group)) for stat in query.stats for group in groups}
    return keys


def test_the_truth_has_a_value_for_every_key_the_presets_queries_yield() -> None:
    series = capture_series()
    layout = Layout(anchor=1_800_000_000.0)
    replicas = replicas_of(_REPLICAS, series, layout)
    exact = truth(series, replicas, layout)
    expected = _expected_keys()
    for k in range(-1, layout.windows):
        window = exact[str(k)]
        assert sorted(expected - set(window)) == [], f"window {k}: keys without truth"
        assert sorted(set(window) - expected) == [], f"window {k}: truth of keys no query yields"
        assert [key for key in expected if not math.isfinite(window[key])] == [], f"window {k}: no finite value"


def test_the_sleeping_replica_is_idle_and_asleep_in_its_window_only() -> None:
    """Replica ``count // 4`` sleeps (weights offloaded, no request running) from its last sample before window
    ``SLEEP_WINDOW`` to that window's end; every other replica always runs requests and stays awake."""
    series = capture_series()
    layout = Layout(anchor=1_800_000_000.0)
    exact = truth(series, replicas_of(_REPLICAS, series, layout), layout)
    idle = "vllm:num_requests_running:servers/idle_seconds"
    awake_min = truth_key("vllm:engine_sleep_state", "min", {"sleep_state": "awake"})
    offloaded_max = truth_key("vllm:engine_sleep_state", "max", {"sleep_state": "weights_offloaded"})
    for k in range(-1, layout.windows):
        window = exact[str(k)]
        if k == SLEEP_WINDOW:
            assert (window[idle], window[awake_min], window[offloaded_max]) == (layout.window_s, _REPLICAS - 1, 1.0)
        elif k == SLEEP_WINDOW - 1:  # asleep at its last sample: idle for the seconds it stands for (to the end)
            assert 0.0 < window[idle] < 2 * layout.interval_s
            assert (window[awake_min], window[offloaded_max]) == (_REPLICAS - 1, 1.0)
        else:
            assert (window[idle], window[awake_min], window[offloaded_max]) == (0.0, _REPLICAS, 0.0)
