"""Configuration: every error is a ConfigError naming the key and what is allowed; env overrides; secrets; presets."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_bridge.config import AuthConfig, BridgeConfig, MetricConfig, apply_env_overrides
from otel_bridge.errors import ConfigError
from otel_bridge.producers.metric_set import resolve_metrics
from otel_bridge.producers.presets import PRESETS, VLLM

PROM = {"url": "http://prometheus:9090"}
SECRET = "s3cr3t-t0ken-value"


def config_error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        BridgeConfig.from_dict(data)
    return str(info.value)


# --- error paths ---


def test_defaults_validate() -> None:
    config = BridgeConfig.from_dict({})
    assert config.source == "auto"
    assert config.resolved_source() is None
    assert [t.type for t in config.trackers] == ["jsonl"]
    assert config.prometheus.timeout_s == 10.0


def test_unknown_top_level_key() -> None:
    message = config_error({"promethues": PROM})
    assert "unknown key 'promethues'" in message
    assert "prometheus" in message.split("allowed keys here:")[1]
    assert "metrics" in message


def test_unknown_nested_key_lists_allowed_keys() -> None:
    message = config_error({"prometheus": {"url": PROM["url"], "timout": 5}})
    assert "prometheus.timout" in message
    allowed = message.split("allowed keys here:")[1]
    assert "timeout_s" in allowed
    assert "url" in allowed


def test_unknown_key_inside_a_metric_list_entry() -> None:
    message = config_error({"prometheus": PROM, "metrics": [{"name": "up"}, {"name": "x", "stat": ["max"]}]})
    assert "metrics[1].stat" in message
    assert "stats" in message.split("allowed keys here:")[1]


def test_wrong_type_names_the_key() -> None:
    message = config_error({"prometheus": {"timeout_s": "soon"}})
    assert "prometheus.timeout_s" in message
    assert "'soon'" in message
    assert "number" in message


def test_out_of_range_value_names_the_key() -> None:
    message = config_error({"prometheus": {"retries": 100}})
    assert "prometheus.retries" in message
    assert "20" in message


def test_literal_lists_allowed_values() -> None:
    message = config_error({"source": "http"})
    assert "'source'" in message
    assert "'auto', 'promql' or 'scrape'" in message


def test_several_problems_are_all_reported() -> None:
    message = config_error({"source": "http", "prometheus": {"timout": 5}})
    assert "(2 problems)" in message
    assert "source" in message
    assert "prometheus.timout" in message


@pytest.mark.parametrize("url", ["ftp://prometheus:9090", "prometheus:9090", "http://", "file:///etc/passwd"])
def test_bad_url_scheme(url: str) -> None:
    message = config_error({"prometheus": {"url": url}})
    assert "prometheus.url" in message
    assert "http:// or https://" in message


def test_url_trailing_slash_is_stripped() -> None:
    assert BridgeConfig.from_dict({"prometheus": {"url": "https://p.example:9090/"}}).prometheus.url == (
        "https://p.example:9090"
    )


def test_scrape_targets_host_port_become_urls_and_bad_ones_are_rejected() -> None:
    config = BridgeConfig.from_dict({"scrape": {"targets": ["10.0.0.1:8000", "https://h:9/metrics"]}})
    assert config.scrape.targets == ["http://10.0.0.1:8000/metrics", "https://h:9/metrics"]
    assert config.resolved_source() == "scrape"
    message = config_error({"scrape": {"targets": ["not a target"]}})
    assert "scrape.targets" in message
    assert "URL or host:port" in message


def test_metric_with_both_name_and_promql() -> None:
    message = config_error({"prometheus": PROM, "metrics": [{"name": "up", "promql": "up", "alias": "u"}]})
    assert "metrics[0]" in message
    assert "exactly one of name, promql, preset, ratio" in message


def test_metric_with_none_of_name_promql_preset_ratio() -> None:
    message = config_error({"prometheus": PROM, "metrics": [{"type": "gauge"}]})
    assert "metrics[0]" in message
    assert "exactly one of name, promql, preset, ratio" in message


def test_promql_metric_without_alias() -> None:
    message = config_error({"prometheus": PROM, "metrics": [{"promql": "sum(up)"}]})
    assert "metrics[0]" in message
    assert "alias" in message


def test_ratio_metric_without_alias() -> None:
    message = config_error({"prometheus": PROM, "metrics": [{"ratio": {"numerator": "a", "denominator": "b"}}]})
    assert "alias" in message


@pytest.mark.parametrize(
    ("kind", "stat", "allowed"),
    [
        ("gauge", "delta", "last, min, max, mean"),
        ("counter", "max", "delta, rate"),
        ("histogram", "p100", "mean, count, sum, pNN"),
        ("histogram", "max", "mean, count, sum, pNN"),
    ],
)
def test_invalid_stats_for_type_list_allowed_stats(kind: str, stat: str, allowed: str) -> None:
    message = config_error({"prometheus": PROM, "metrics": [{"name": "x", "type": kind, "stats": [stat]}]})
    assert "metrics[0]" in message
    assert repr(stat) in message
    assert f"allowed: {allowed}" in message


def test_empty_stats_rejected() -> None:
    message = config_error({"prometheus": PROM, "metrics": [{"name": "x", "type": "gauge", "stats": []}]})
    assert "stats must not be empty" in message


@pytest.mark.parametrize(("field", "label"), [("by", "model-name"), ("by", "__name__"), ("labels", "9lives")])
def test_invalid_label_name(field: str, label: str) -> None:
    value: Any = [label] if field == "by" else {label: "x"}
    message = config_error({"prometheus": PROM, "metrics": [{"name": "x", field: value}]})
    assert "metrics[0]" in message
    assert repr(label) in message
    assert "[a-zA-Z_][a-zA-Z0-9_]*" in message


def test_invalid_metric_name() -> None:
    message = config_error({"prometheus": PROM, "metrics": [{"name": "vllm-tokens"}]})
    assert "'vllm-tokens' is not a valid Prometheus metric name" in message


def test_preset_entry_rejects_stats() -> None:
    message = config_error({"prometheus": PROM, "metrics": [{"preset": "vllm", "stats": ["max"]}]})
    assert "a preset entry takes only `preset`" in message


def test_unknown_preset_is_a_config_problem_with_the_others() -> None:
    """Issue 36: a misspelt preset is found when the config is validated, with the file's other problems."""
    message = config_error({"prometheus": {**PROM, "urll": "x"}, "metrics": [{"name": "up"}, {"preset": "vllmm"}]})
    assert "(2 problems)" in message
    assert "metrics[1]" in message
    assert "unknown preset 'vllmm'; available: vllm, sglang, ray, dcgm, amd, node; did you mean 'vllm'?" in message
    assert "did you mean 'prometheus.url'?" in message


def test_duplicate_metric_keys() -> None:
    configs = [MetricConfig(name="vllm:num_requests_running"), MetricConfig(preset="vllm")]
    with pytest.raises(ConfigError) as info:
        resolve_metrics(configs)
    message = str(info.value)
    assert "vllm:num_requests_running is configured twice" in message
    assert "metrics[0]" in message
    assert "alias" in message


def test_same_name_with_different_label_matchers_is_not_a_duplicate() -> None:
    configs = [MetricConfig(name="up", labels={"job": "a"}), MetricConfig(name="up", labels={"job": "b"})]
    assert [q.matchers for q in resolve_metrics(configs)] == [(("job", "a"),), (("job", "b"),)]


def test_alias_resolves_a_duplicate() -> None:
    configs = [MetricConfig(name="up"), MetricConfig(name="up", alias="up_again")]
    assert [q.key_name for q in resolve_metrics(configs)] == ["up", "up_again"]


def test_source_promql_without_url() -> None:
    message = config_error({"source": "promql"})
    assert "source is promql but prometheus.url is not set" in message


def test_scrape_source_rejects_promql_metrics_and_needs_targets() -> None:
    message = config_error(
        {"source": "scrape", "scrape": {"targets": ["h:1"]}, "metrics": [{"promql": "up", "alias": "u"}]}
    )
    assert "['u']" in message
    assert "prometheus.url" in message
    message = config_error({"source": "scrape", "metrics": [{"name": "up"}]})
    assert "scrape.targets" in message


# --- files ---


def test_load_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "bridge.yaml"
    path.write_text("prometheus:\n  url: http://p:9090\nmetrics:\n  - preset: vllm\n", encoding="utf-8")
    config = BridgeConfig.load(path, environ={})
    assert config.prometheus.url == "http://p:9090"
    assert config.resolved_source() == "promql"
    assert BridgeConfig.load(str(path), environ={}) == config


def test_load_empty_yaml_file_gives_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing\n", encoding="utf-8")
    assert BridgeConfig.load(path, environ={}) == BridgeConfig.from_dict({})


def test_load_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        BridgeConfig.load(path, environ={})
    assert str(path) in str(info.value)
    assert "No such file" in str(info.value)


def test_load_invalid_yaml(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("prometheus: {url: [\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        BridgeConfig.load(path, environ={})


def test_load_rejects_other_source_types() -> None:
    with pytest.raises(ConfigError, match="not int"):
        BridgeConfig.load(5, environ={})  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["- 1\n- 2\n", "just a string\n", "42\n", "- ab\n- cd\n"])
def test_yaml_not_a_mapping(tmp_path: Path, text: str) -> None:
    path = tmp_path / "list.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        BridgeConfig.load(path, environ={})


def test_yaml_file_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("run:\n  name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=str(path)):
        BridgeConfig.load(path, environ={})


# --- environment overrides ---


def test_env_override_nested_key_is_read_as_yaml_scalar() -> None:
    config = BridgeConfig.load({"prometheus": PROM}, environ={"OTEL_BRIDGE__PROMETHEUS__TIMEOUT_S": "5"})
    assert config.prometheus.timeout_s == 5.0
    assert config.prometheus.url == PROM["url"]


def test_env_override_prometheus_url() -> None:
    config = BridgeConfig.load({}, environ={"OTEL_BRIDGE_PROMETHEUS_URL": "http://from-env:9090/"})
    assert config.prometheus.url == "http://from-env:9090"
    assert config.resolved_source() == "promql"


def test_env_overrides_win_over_file_values_and_create_sections() -> None:
    environ = {
        "OTEL_BRIDGE_PROMETHEUS_URL": "http://env:9090",
        "OTEL_BRIDGE__DELIVERY__QUEUE_SIZE": "7",
        "OTEL_BRIDGE__SCRAPE__TARGETS": "[a:1, b:2]",
        "OTEL_BRIDGE__PROMETHEUS__TLS__VERIFY": "false",
        "UNRELATED": "x",
    }
    config = BridgeConfig.load({"prometheus": {"url": "auto"}}, environ=environ)
    assert config.prometheus.url == "http://env:9090"
    assert config.delivery.queue_size == 7
    assert config.scrape.targets == ["http://a:1/metrics", "http://b:2/metrics"]
    assert config.prometheus.tls.verify is False


def test_explicit_url_in_the_config_wins_over_otel_bridge_prometheus_url() -> None:
    environ = {"OTEL_BRIDGE_PROMETHEUS_URL": "http://env:9090"}
    config = BridgeConfig.load({"prometheus": {"url": "http://file:9090"}}, environ=environ)
    assert config.prometheus.url == "http://file:9090"
    nested = BridgeConfig.load(
        {"prometheus": {"url": "http://file:9090"}}, environ={"OTEL_BRIDGE__PROMETHEUS__URL": "http://o:1"}
    )
    assert nested.prometheus.url == "http://o:1"


def test_env_override_does_not_modify_the_input_mapping() -> None:
    data = {"prometheus": {"url": "http://file:9090"}}
    apply_env_overrides(data, {"OTEL_BRIDGE__PROMETHEUS__URL": "http://env:9090"})
    assert data == {"prometheus": {"url": "http://file:9090"}}


def test_env_override_with_bad_value_is_a_config_error_naming_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        BridgeConfig.load({}, environ={"OTEL_BRIDGE__PROMETHEUS__TIMOUT_S": "5"})
    assert "prometheus.timout_s" in str(info.value)
    assert "timeout_s" in str(info.value).split("allowed keys here:")[1]


def test_load_reads_os_environ_when_environ_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BRIDGE__DELIVERY__QUEUE_SIZE", "11")
    assert BridgeConfig.load({}).delivery.queue_size == 11


# --- secrets ---


def test_bearer_token_from_env() -> None:
    auth = AuthConfig(bearer_token_env="PROM_TOKEN")
    assert auth.bearer_token(environ={"PROM_TOKEN": f"  {SECRET}\n"}) == SECRET
    assert auth.basic_auth(environ={"PROM_TOKEN": SECRET}) is None


def test_bearer_token_from_file(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(SECRET + "\n", encoding="utf-8")
    assert AuthConfig(bearer_token_file=path).bearer_token(environ={}) == SECRET


def test_basic_auth_password_from_env() -> None:
    auth = AuthConfig(username="bob", password_env="PROM_PASSWORD")
    assert auth.basic_auth(environ={"PROM_PASSWORD": SECRET}) == ("bob", SECRET)
    assert auth.bearer_token(environ={"PROM_PASSWORD": SECRET}) is None


@pytest.mark.parametrize("environ", [{}, {"PROM_TOKEN": ""}, {"OTHER": SECRET}])
def test_missing_token_env_var_names_the_variable_and_never_a_secret(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as info:
        AuthConfig(bearer_token_env="PROM_TOKEN").bearer_token(environ=environ)
    assert "PROM_TOKEN" in str(info.value)
    assert SECRET not in str(info.value)


def test_missing_password_env_var_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="PROM_PASSWORD"):
        AuthConfig(username="bob", password_env="PROM_PASSWORD").basic_auth(environ={})


def test_unreadable_token_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "missing-token"
    with pytest.raises(ConfigError) as info:
        AuthConfig(bearer_token_file=path).bearer_token(environ={})
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("auth", "message"),
    [
        ({"bearer_token_env": "T", "username": "u", "password_env": "P"}, "not both"),
        ({"bearer_token_env": "T", "bearer_token_file": "/t"}, "only one of bearer_token_env and bearer_token_file"),
        ({"username": "u"}, "basic auth needs username"),
        ({"password_env": "P"}, "basic auth needs username"),
    ],
)
def test_auth_shape_errors(auth: dict[str, str], message: str) -> None:
    assert message in config_error({"prometheus": {**PROM, "auth": auth}})


def test_secret_never_in_config_repr_or_errors(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(SECRET, encoding="utf-8")
    environ = {"PROM_TOKEN": SECRET, "OTEL_BRIDGE__PROMETHEUS__AUTH__BEARER_TOKEN_FILE": str(path)}
    with pytest.raises(ConfigError) as info:
        # bearer_token_env from the dict + bearer_token_file from env: invalid, the error must not read the secret
        BridgeConfig.load({"prometheus": {**PROM, "auth": {"bearer_token_env": "PROM_TOKEN"}}}, environ=environ)
    assert SECRET not in str(info.value)
    config = BridgeConfig.load({"prometheus": {**PROM, "auth": {"bearer_token_env": "PROM_TOKEN"}}}, environ={})
    assert config.prometheus.auth.bearer_token(environ=environ) == SECRET
    assert SECRET not in repr(config)
    assert SECRET not in str(config.model_dump())


def test_empty_token_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=str(path)):
        AuthConfig(bearer_token_file=path).bearer_token(environ={})


def test_non_utf8_token_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_bytes(b"\xff\xfe" + SECRET.encode())
    with pytest.raises(ConfigError) as info:
        AuthConfig(bearer_token_file=path).bearer_token(environ={})
    assert SECRET not in str(info.value)


# --- presets and deprecated names ---


def test_vllm_preset_expands_to_the_documented_keys() -> None:
    queries = resolve_metrics([MetricConfig(preset="vllm", by=["model_name"])])
    assert [q.key_name for q in queries] == [
        "vllm:generation_tokens_total",
        "vllm:prompt_tokens_total",
        "vllm:request_success_total",
        "vllm:num_preemptions_total",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_requests_running:servers",
        "vllm:engine_sleep_state",
        "vllm:prefix_cache_hit_rate",
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
    ]
    by_key = {q.key_name: q for q in queries}
    assert by_key["vllm:engine_sleep_state"].by == ("sleep_state", "model_name")  # the entry's own labels first
    assert all(q.by == ("model_name",) for q in queries if q.key_name != "vllm:engine_sleep_state")
    idle = by_key["vllm:num_requests_running:servers"]  # idle server-seconds
    assert (idle.name, idle.stats, idle.agg, idle.busy_at, idle.full_scale) == (
        "vllm:num_requests_running",
        ("idle_seconds",),
        "sum",
        1,
        None,
    )
    assert by_key["vllm:generation_tokens_total"].stats == ("delta", "rate")
    assert by_key["vllm:kv_cache_usage_perc"].kind == "gauge"
    assert by_key["vllm:kv_cache_usage_perc"].agg == "max"
    assert by_key["vllm:prefix_cache_hit_rate"].ratio == (
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
    )
    assert by_key["vllm:time_to_first_token_seconds"].series_names() == (
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:time_to_first_token_seconds_sum",
        "vllm:time_to_first_token_seconds_count",
    )
    assert all(q.source_index == 0 for q in queries)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_entry_is_valid_and_typed(name: str) -> None:
    queries = resolve_metrics([MetricConfig(preset=name)])
    assert len(queries) == len(PRESETS[name])
    assert all(q.kind is not None and (q.stats or q.ratio) for q in queries)


def test_preset_entries_do_not_use_deprecated_names() -> None:
    from otel_bridge.producers.presets import DEPRECATED

    names = {e.get("name") for entries in PRESETS.values() for e in entries}
    assert not names & set(DEPRECATED)
    assert len(VLLM) == 14


def test_preset_agg_is_applied_or_rejected() -> None:
    try:
        queries = resolve_metrics([MetricConfig(preset="vllm", agg="min")])
    except ConfigError:
        return
    gauges = [q for q in queries if q.kind == "gauge"]
    assert gauges
    assert all(q.agg == "min" for q in gauges)


def test_deprecated_vllm_name_is_replaced_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="otel_bridge.producers.metric_set"):
        (query,) = resolve_metrics([MetricConfig(name="vllm:gpu_cache_usage_perc", agg="max", by=["instance"])])
    assert query.name == "vllm:kv_cache_usage_perc"
    assert query.key_name == "vllm:kv_cache_usage_perc"
    assert query.kind == "gauge"
    assert query.stats == ("last", "max")
    assert query.agg == "max"
    assert query.by == ("instance",)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "vllm:gpu_cache_usage_perc" in warnings[0].getMessage()
    assert "vllm:kv_cache_usage_perc" in warnings[0].getMessage()
    assert "metrics[0]" in warnings[0].getMessage()


def test_deprecated_name_keeps_valid_stats_alias_and_labels(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        (query,) = resolve_metrics(
            [
                MetricConfig(
                    name="vllm:time_per_output_token_seconds",
                    stats=["p90"],
                    alias="tpot",
                    labels={"model_name": "policy"},
                )
            ]
        )
    assert query.name == "vllm:inter_token_latency_seconds"
    assert query.kind == "histogram"
    assert query.stats == ("p90",)
    assert query.key_name == "tpot"
    assert query.matchers == (("model_name", "policy"),)


def test_deprecated_hit_rate_becomes_the_ratio(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        (query,) = resolve_metrics([MetricConfig(name="vllm:gpu_prefix_cache_hit_rate")])
    assert query.ratio == ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")
    assert query.key_name == "vllm:prefix_cache_hit_rate"
    assert "delta(vllm:prefix_cache_hits_total)" in caplog.text


def test_unknown_type_stats_are_checked_when_the_kind_is_learned() -> None:
    (query,) = resolve_metrics([MetricConfig(name="my_gauge", stats=["delta"])])
    assert query.needs_kind
    with pytest.raises(ConfigError) as info:
        query.with_kind("gauge")
    assert "allowed: last, min, max, mean" in str(info.value)
    assert query.with_kind("counter").stats == ("delta",)
    (untyped,) = resolve_metrics([MetricConfig(name="my_hist")])
    assert untyped.with_kind("histogram").stats == ("mean", "p50", "p99", "count")


def test_deprecated_name_with_stats_invalid_for_the_replacement_is_an_error(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING), pytest.raises(ConfigError, match="allowed: last, min, max, mean"):
        resolve_metrics([MetricConfig(name="vllm:gpu_cache_usage_perc", stats=["delta"])])


# --- property: from_dict never raises anything but ConfigError ---

_KEYS = st.sampled_from(
    [
        "source",
        "prometheus",
        "scrape",
        "metrics",
        "trackers",
        "naming",
        "run",
        "delivery",
        "url",
        "timeout_s",
        "retries",
        "auth",
        "tls",
        "targets",
        "name",
        "promql",
        "preset",
        "ratio",
        "numerator",
        "denominator",
        "type",
        "stats",
        "by",
        "agg",
        "labels",
        "alias",
        "bearer_token_env",
        "username",
        "password_file",
        "verify",
        "key_file",
        "infra_prefix",
        "dir",
        "queue_size",
    ]
)
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["http://h:1", "promql", "scrape", "vllm", "gauge", "histogram", "p99", "max", "h:1", "jsonl"])
)
_VALUES = st.recursive(
    _SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(_KEYS | st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_KEYS | st.text(max_size=10), _VALUES, max_size=6))
def test_from_dict_validates_or_raises_config_error(data: dict[str, Any]) -> None:
    try:
        config = BridgeConfig.from_dict(data)
    except ConfigError as exc:
        message = str(exc)
    else:
        # nothing given was dropped silently (unknown keys are errors), and what validated validates again unchanged
        assert set(data) <= set(BridgeConfig.model_fields)
        assert BridgeConfig.from_dict(config.model_dump()) == config
        return
    assert re.match(r"invalid otel-bridge config( \(\d+ problems\))?:\n  - \S", message)


def _section(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


_VALID_CONFIGS = _section(
    startup=st.sampled_from(["strict", "degrade"]),
    scrape=_section(
        targets=st.lists(st.sampled_from(["h:1", "127.0.0.1:8000", "https://h:2/m"]), max_size=3),
        timeout_s=st.floats(min_value=0.001, max_value=1e6),
        sample_interval_s=st.floats(min_value=0, max_value=60),
    ),
    naming=_section(infra_prefix=st.text(max_size=8)),
    run=_section(name=st.from_regex(r"[A-Za-z0-9._\-]{1,12}", fullmatch=True), handle_sigterm=st.booleans()),
    delivery=_section(queue_size=st.integers(1, 10_000), max_block_s=st.floats(0, 10), rank=st.integers(0, 64)),
    otel=_section(resource_attributes=st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3)),
)


def _normalised_target(target: str) -> str:
    return target if "://" in target else f"http://{target}/metrics"


@settings(max_examples=200, deadline=None, derandomize=True)
@given(_VALID_CONFIGS)
def test_valid_values_are_kept_as_given(data: dict[str, Any]) -> None:
    """The fuzz test above mostly exercises rejection; here every config is valid and each value given must be the
    value the model holds (targets in their normalised URL form), and must validate again unchanged."""
    config = BridgeConfig.from_dict(data)
    for section, values in data.items():
        if not isinstance(values, dict):
            assert getattr(config, section) == values
            continue
        for key, value in values.items():
            expected = [_normalised_target(t) for t in value] if (section, key) == ("scrape", "targets") else value
            assert getattr(getattr(config, section), key) == expected, (section, key)
    assert BridgeConfig.from_dict(config.model_dump()) == config


def test_three_typos_take_one_run_tracker_types_included() -> None:
    """Issue 26: a misspelt key, a misspelt tracker type and a wrong value are reported together, each with its key
    and a did-you-mean where one fits; the tracker's used to surface only when the backends were built, a run later."""
    message = config_error(
        {
            "prometheus": {"url": "http://prometheus:9090", "timout_s": 5},
            "trackers": [{"type": "jsonl"}, {"type": "tensorbord"}],
            "delivery": {"produce_timeout_s": -1},
        }
    )
    assert "(3 problems)" in message, message
    assert "prometheus.timout_s" in message, message
    assert "did you mean 'prometheus.timeout_s'?" in message, message
    assert "trackers[1].type" in message, message
    assert "unknown tracker 'tensorbord'; did you mean 'tensorboard'?" in message, message
    assert "delivery.produce_timeout_s" in message, message
