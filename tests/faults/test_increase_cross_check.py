"""A store whose exact increase is wrong but possible: a real Prometheus 3.16 behind a reverse proxy that halves (or
zeroes) the answers to the ``anchored`` increase parts and leaves every other answer alone (issue 37 finding 4).

Before: a plausible positive figure cannot be told from a right one by itself (docs/failure-behaviour.md), so the run's
deltas were silently half the truth. Now the plan's first windows read through the store's exact increase are
cross-checked once against the samples around their boundaries: a disagreement is one start-up WARNING naming the
store, the plan, the metric and both figures, counted in ``otel_bridge/increase_disagreements{metric}``, and the
run reads its counters from the samples from then on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_bridge.health import INCREASE_DISAGREEMENTS
from tests.faults.support import CountingServer, RewrittenIncreases, collect_steps, count_logs, lying_prometheus

pytestmark = pytest.mark.integration

NAME = "vllm:generation_tokens_total"
METRICS = [{"name": NAME, "type": "counter", "stats": ["delta"]}]
DELTA = "rollout/vllm/generation_tokens_total/delta"


@pytest.mark.parametrize("factor", [0.5, 0.0])
def test_an_exact_increase_that_disagrees_with_the_samples_is_warned_once_and_counted(
    tmp_path: Path, factor: float, caplog: pytest.LogCaptureFixture
) -> None:
    store = RewrittenIncreases(lambda value: repr(float(value) * factor))
    with lying_prometheus(tmp_path, CountingServer(NAME), NAME, store, METRICS) as config:
        collecting, bridge = collect_steps(config, 5, seconds=0.8, caplog=caplog)  # three scrapes in each window
        disagreements = bridge.health.counter(INCREASE_DISAGREEMENTS, {"metric": NAME})
    records = collecting.by_step()
    assert store.lies >= 1
    assert disagreements == 1.0
    assert count_logs(caplog, "disagree") == 1
    warning = next(r.getMessage() for r in caplog.records if "disagree" in r.getMessage())
    assert "Prometheus 3.16" in warning
    assert "anchored" in warning
    assert NAME in warning
    assert records[4][f"{INCREASE_DISAGREEMENTS}/metric.vllm_generation_tokens_total"] == 1.0
    # from then on the counters are read from the samples: every later window has its whole increase (10 a scrape,
    # three or four scrapes a window), not the store's wrong figure
    later = [records[step][DELTA] for step in range(1, 5)]
    assert all(delta >= 20.0 for delta in later), later


def test_an_exact_increase_that_agrees_with_the_samples_says_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The same run through a proxy that changes nothing: the cross-check finds nothing to say."""
    store = RewrittenIncreases(lambda value: value)
    with lying_prometheus(tmp_path, CountingServer(NAME), NAME, store, METRICS) as config:
        collecting, bridge = collect_steps(config, 5, seconds=0.8, caplog=caplog)
        disagreements = bridge.health.counter(INCREASE_DISAGREEMENTS, {"metric": NAME})
    assert store.lies >= 1
    assert disagreements == 0.0
    assert count_logs(caplog, "disagree") == 0
    assert all(values[DELTA] >= 20.0 for step, values in collecting.by_step().items() if step >= 1)
