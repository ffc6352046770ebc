"""Bad input: structured config fuzzing (metrics, trackers, auth, env overrides) and non-finite values.

Extends the flat property test in tests/unit/test_config.py with nested, shape-aware fuzzing. The exposition parser's
garbage-input properties live in tests/unit/test_exposition.py (text, syntax fragments and mutations all end in
``ExpositionParseError``); nothing is missing there.
"""

from __future__ import annotations

import contextlib
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_bridge import Bridge, BridgeConfig, ConfigError
from otel_bridge.errors import BackendError
from otel_bridge.exporters.backends.registry import create_backend
from otel_bridge.health import NONFINITE_VALUES
from tests.conftest import Replica
from tests.helpers.backends import BackendDouble

FUZZ = settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])

_NAMES = st.sampled_from(
    ["vllm:num_requests_running", "up", "a_b:c", "", "1bad", 'x{a="b"}', "x y", "vllm:x\n", "__name__", "é"]
)
_ANY = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats() | st.text(max_size=12) | _NAMES,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6) | _NAMES, children, max_size=3)
    ),
    max_leaves=10,
)
_STATS = st.lists(st.sampled_from(["delta", "rate", "last", "max", "min", "mean", "p99", "p50.5", "p101", "sum", "x"]))
_METRIC = st.fixed_dictionaries(
    {},
    optional={
        "name": _NAMES | _ANY,
        "promql": st.sampled_from(["sum(up)", "rate(x[$window])", "", "up)"]) | _ANY,
        "preset": st.sampled_from(["vllm", "sglang", "ray", "nope"]) | _ANY,
        "ratio": st.fixed_dictionaries({}, optional={"numerator": _NAMES, "denominator": _NAMES}) | _ANY,
        "type": st.sampled_from(["counter", "gauge", "histogram", "summary"]) | _ANY,
        "stats": _STATS | _ANY,
        "by": st.lists(_NAMES) | _ANY,
        "agg": st.sampled_from(["sum", "mean", "max", "min", "median"]) | _ANY,
        "labels": st.dictionaries(_NAMES, st.text(max_size=8) | _ANY, max_size=3) | _ANY,
        "alias": st.text(max_size=10) | _ANY,
        "extra": _ANY,
    },
)
_AUTH = st.fixed_dictionaries(
    {},
    optional={
        "bearer_token_env": st.sampled_from(["FUZZ_TOKEN", "FUZZ_UNSET", ""]) | _ANY,
        "bearer_token_file": st.sampled_from(["/nonexistent/token", "token"]) | _ANY,
        "username": st.text(max_size=8) | _ANY,
        "password_env": st.sampled_from(["FUZZ_TOKEN", "FUZZ_UNSET"]) | _ANY,
        "password_file": st.sampled_from(["/nonexistent/pw", ""]) | _ANY,
        "bearer_token": st.text(max_size=8),
    },
)
_PROMETHEUS = st.fixed_dictionaries(
    {"url": st.sampled_from(["http://127.0.0.1:9", "https://h:1/p", "auto", "ftp://h", "h:1"]) | _ANY},
    optional={
        "auth": _AUTH | _ANY,
        "tls": st.fixed_dictionaries({}, optional={"verify": _ANY, "ca_file": _ANY, "key_file": _ANY}) | _ANY,
        "timeout_s": _ANY,
        "max_series": _ANY,
        "max_response_bytes": _ANY,
    },
)


@FUZZ
@given(st.lists(_METRIC | _ANY, max_size=4), _PROMETHEUS | _ANY, st.sampled_from(["auto", "promql", "scrape", "x"]))
def test_nested_metrics_and_prometheus_sections(metrics: Any, prometheus: Any, source: str) -> None:
    try:
        config = BridgeConfig.from_dict({"metrics": metrics, "prometheus": prometheus, "source": source})
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith("invalid otel-bridge config")
        return
    try:  # secrets are read at start-up: a missing or unreadable source is a ConfigError too
        config.prometheus.auth.bearer_token(environ={"FUZZ_TOKEN": "t"})
        config.prometheus.auth.basic_auth(environ={"FUZZ_TOKEN": "t"})
    except ConfigError:
        pass


_TRACKER_OPTIONS = st.dictionaries(
    st.sampled_from(["path", "logdir", "every", "max_keys", "stream", "project", "bogus"]),
    st.none() | st.booleans() | st.integers(-3, 50) | st.floats() | st.sampled_from(["out.jsonl", "sub/x", "stderr"]),
    max_size=3,
)


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["jsonl", "console", "tensorboard", "no-such-tracker", ""]) | st.text(max_size=8), _TRACKER_OPTIONS
)
def test_tracker_sections(kind: str, options: dict[str, Any]) -> None:
    try:
        config = BridgeConfig.from_dict({"trackers": [{"type": kind, **options}]})
    except ConfigError:
        return
    tracker = config.trackers[0]
    with tempfile.TemporaryDirectory() as run_dir:
        try:
            backend = create_backend(tracker.type, tracker.options(), Path(run_dir))
        except ConfigError:
            return
        except BackendError:  # a valid option whose output cannot be opened (e.g. a path that is a directory)
            return
        backend.close()


@FUZZ
@given(
    st.lists(
        st.sampled_from(["prometheus", "scrape", "delivery", "metrics", "auth", "url", "timeout_s", "x", ""]),
        min_size=1,
        max_size=3,
    ),
    st.text(max_size=20) | st.sampled_from(["[a, b]", "{a: 1}", "- x", "5", "true", "null", "1e400", "http://h:1"]),
)
def test_environment_overrides(path: list[str], raw: str) -> None:
    environ = {"OTEL_BRIDGE__" + "__".join(p.upper() for p in path): raw}
    with contextlib.suppress(ConfigError):
        BridgeConfig.load({}, environ=environ)


@pytest.mark.integration
def test_non_finite_values_never_reach_a_backend(tmp_path: Path, replicas: list[Replica]) -> None:
    """NaN/Inf in the trainer's dict are left out of every backend's record and counted in
    ``otel_bridge/nonfinite_values``; the quantile of a window without requests has no value and is not counted (an
    empty window is not a non-finite value, issue 26)."""
    collecting = BackendDouble()
    config = {
        "scrape": {"targets": [r.hostport for r in replicas], "sample_interval_s": 0},
        "metrics": [{"name": "vllm:time_to_first_token_seconds", "type": "histogram", "stats": ["p99", "count"]}],
        "trackers": [{"type": "jsonl"}, {"type": "tensorboard"}, {"type": "console", "stream": "stderr"}],
        "run": {"name": "nan", "dir": str(tmp_path)},
    }
    with Bridge.from_config(config, backends=[collecting]) as bridge:
        for step in range(3):
            with bridge.step(step):
                bridge.log({"ok": 1.0, "nan": math.nan, "inf": math.inf, "ninf": -math.inf}, step=step)
        last = bridge.collect(2)
        nonfinite = bridge.health.counter(NONFINITE_VALUES)
    records = collecting.by_step()
    for values in records.values():
        assert all(math.isfinite(v) for v in values.values())
        assert values["ok"] == 1.0
        assert not {"nan", "inf", "ninf"} & set(values)
        assert "rollout/vllm/time_to_first_token_seconds/p99" not in values  # no requests: no value
        assert values["rollout/vllm/time_to_first_token_seconds/count"] == 0.0
    assert nonfinite == 3 * 3  # three trainer values per step; the empty windows' quantiles are not faults
    assert last[NONFINITE_VALUES] == 3 * 3
    jsonl = [json.loads(line) for line in (tmp_path / "nan" / "metrics.jsonl").read_text().splitlines()]
    assert [line["ok"] for line in jsonl] == [1.0, 1.0, 1.0]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "nan" / "tensorboard"))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert "ok" in tags
    assert not {"nan", "inf", "ninf"} & set(tags)
    assert all(math.isfinite(e.value) for tag in tags for e in events.Scalars(tag))
    assert bridge.health.counter("otel_bridge/backend_errors", {"backend": "console"}) == 0
