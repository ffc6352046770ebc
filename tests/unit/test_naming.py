"""Tracker key naming: table-driven examples and properties checked against every backend's key rules."""

from __future__ import annotations

import logging
import posixpath
import re
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import summary_pb2

from otel_bridge.errors import ConfigError
from otel_bridge.exporters.naming import (
    MAX_KEY_LENGTH,
    MLFLOW_KEYS,
    RESERVED_KEYS,
    TRACKIO_KEYS,
    TRACKIO_RESERVED,
    WANDB_KEYS,
    KeyRegistry,
    KeyRule,
    TrackerKeys,
    infra_key,
    record_key,
    sanitize_key,
    stable_hash,
    trainer_key,
)

# --- each backend's key rules ---

# MLflow (not installed here): mlflow/utils/validation.py, ``_validate_metric_name`` and ``_validate_metric``:
# the name must match ``_VALID_PARAM_AND_METRIC_NAMES`` (used with ``re.match``), must not be changed by
# ``posixpath.normpath`` nor resolve to "." / ".." / an absolute path (``path_not_unique``), and is at most
# ``MAX_ENTITY_KEY_LENGTH`` = 250 characters. Copied here verbatim in behaviour.
_MLFLOW_VALID_NAMES = re.compile(r"^[/\w.\- ]*$")


def _mlflow_path_not_unique(name: str) -> bool:
    norm = posixpath.normpath(name)
    return norm != name or norm == "." or norm.startswith("..") or norm.startswith("/")


def mlflow_accepts(key: str) -> bool:
    return (
        bool(_MLFLOW_VALID_NAMES.match(key))
        and not _mlflow_path_not_unique(key)
        and len(key) <= 250
        and "//" not in key
    )


# wandb (not installed here): ``run.log`` requires ``str`` keys; keys starting with "_" are wandb's own
# (``_step``, ``_runtime``, ``_timestamp``, ``_wandb``), documented at docs.wandb.ai "Log objects and media".
# Its GraphQL naming advice (letters, digits, "_") only affects sorting/filtering in the UI, and "/" is how
# wandb groups panels, so it is not a rejection rule. Every key is declared with ``define_metric``, which refuses a
# "*" before a name's last character, escaped or not (wandb/sdk/wandb_run.py: "glob suffixes only").
def wandb_accepts(key: str) -> bool:
    return isinstance(key, str) and key != "" and not key.startswith("_") and "*" not in key[:-1]


# TensorBoard: any tag is accepted; the only requirement is that the tag survives the Summary proto
# (a protobuf ``string``, i.e. valid UTF-8) unchanged.
def tensorboard_accepts(key: str) -> bool:
    value = summary_pb2.Summary.Value(tag=key, simple_value=1.0)
    parsed = summary_pb2.Summary.Value.FromString(value.SerializeToString())
    return bool(parsed.tag == key)


# JSONL (ours): a metric key must not shadow a record field.
def jsonl_accepts(key: str) -> bool:
    return key not in RESERVED_KEYS and key != "_notes"


def assert_valid_everywhere(key: str) -> None:
    assert key, "empty key"
    assert mlflow_accepts(key), f"MLflow rejects {key!r}"
    assert wandb_accepts(key), f"wandb rejects {key!r}"
    assert tensorboard_accepts(key), f"TensorBoard changes {key!r}"
    assert jsonl_accepts(key), f"JSONL field clash {key!r}"
    assert re.fullmatch(r"[A-Za-z0-9_\-./ ]+", key), f"character outside the allowed set in {key!r}"
    assert "//" not in key
    assert not key.startswith("/")
    assert not key.endswith("/")
    assert len(key) <= MAX_KEY_LENGTH


# --- examples ---


@pytest.mark.parametrize(
    ("name", "stat", "group", "prefix", "alias", "expected"),
    [
        ("vllm:generation_tokens_total", None, {}, "rollout", None, "rollout/vllm/generation_tokens_total"),
        (
            "vllm:generation_tokens_total",
            "delta",
            {},
            "rollout",
            None,
            "rollout/vllm/generation_tokens_total/delta",
        ),
        (
            "vllm:generation_tokens_total",
            "delta",
            {"model_name": "m"},
            "rollout",
            None,
            "rollout/vllm/generation_tokens_total/delta/model_name.m",
        ),
        (
            "vllm:num_requests_running",
            "max",
            {"model_name": "m", "engine": "0"},
            "rollout",
            None,
            "rollout/vllm/num_requests_running/max/engine.0/model_name.m",
        ),
        ("vllm:generation_tokens_total", "delta", {}, "rollout", "gen_tokens", "rollout/gen_tokens/delta"),
        ("vllm:generation_tokens_total", "delta", {}, "", None, "vllm/generation_tokens_total/delta"),
        (
            "vllm:time_to_first_token_seconds",
            "p99",
            {},
            "infra/rollout",
            None,
            "infra/rollout/vllm/time_to_first_token_seconds/p99",
        ),
        # a "/" inside a label value must not add a path segment
        (
            "vllm:generation_tokens_total",
            "rate",
            {"model_name": "meta-llama/Llama-3.1-8B"},
            "rollout",
            None,
            "rollout/vllm/generation_tokens_total/rate/model_name.meta-llama_Llama-3.1-8B",
        ),
        (
            "sglang:token_usage",
            "last",
            {"instance": "127.0.0.1:30000"},
            "rollout",
            None,
            "rollout/sglang/token_usage/last/instance.127.0.0.1_30000",
        ),
        ("ray_node_cpu_utilization", "mean", {}, "infra", None, "infra/ray_node_cpu_utilization/mean"),
    ],
)
def test_infra_key_examples(
    name: str, stat: str | None, group: dict[str, str], prefix: str, alias: str | None, expected: str
) -> None:
    key = infra_key(name, stat, group, prefix=prefix, alias=alias)
    assert key == expected
    assert_valid_everywhere(key)


def test_infra_key_default_prefix_is_rollout() -> None:
    assert infra_key("vllm:kv_cache_usage_perc", "max", {}) == "rollout/vllm/kv_cache_usage_perc/max"


def test_infra_key_rejects_empty_alias() -> None:
    with pytest.raises(ConfigError, match="alias of metric 'vllm:x' is empty"):
        infra_key("vllm:x", "delta", {}, alias=" ")


@pytest.mark.parametrize(
    "name",
    [
        "actor/loss",
        "critic/vf_loss",
        "perf/throughput",
        "timing_s/gen",
        "response_length/clip_ratio",
        "trainer.tokens",
        "otel_bridge.queries.failed",
        "train loss",
        # issue 26: verl's validation keys reach the trackers as verl logs them
        "val-core/openai/gsm8k/reward/mean@1",
        "val-aux/gsm8k/score/maj@4/mean",
        "_private",
        "a//b",
        "naïve/ключ",
    ],
)
def test_trainer_keys_are_kept_as_logged(name: str) -> None:
    assert trainer_key(name) == name


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("esc\x1b[31mred", "esc_[31mred"),  # a terminal escape sequence never reaches a tracker or the console
        ("line\nbreak", "line_break"),
        ("nul\x00", "nul_"),
        ("c1\x9b", "c1_"),
        ("lone\ud800surrogate", "lone_surrogate"),
        ("step", "step_"),
        ("_notes", "_notes_"),
        ("", f"unnamed_{stable_hash('')}"),
        ("   ", f"unnamed_{stable_hash('   ')}"),
    ],
)
def test_record_key_changes_only_what_no_tracker_should_receive(raw: str, expected: str) -> None:
    assert record_key(raw) == expected == trainer_key(raw)


@pytest.mark.parametrize(
    ("rule", "raw", "expected"),
    [
        (MLFLOW_KEYS, "val-core/gsm8k/reward/mean@1", "val-core/gsm8k/reward/mean_at_1"),  # verl's MLflow logger
        (MLFLOW_KEYS, "a{b}=c,d:e", "a_b__c_d:e"),
        (MLFLOW_KEYS, "a//b/", "a/b"),
        (MLFLOW_KEYS, "a/./b", "a/_/b"),
        (MLFLOW_KEYS, "..a/b", "_.a/b"),
        (MLFLOW_KEYS, "actor/loss", "actor/loss"),
        (WANDB_KEYS, "_private", "private"),
        (WANDB_KEYS, "a@b", "a@b"),
        (TRACKIO_KEYS, "run", "run_"),
        (TRACKIO_KEYS, "__x", "x"),
        (TRACKIO_KEYS, "a@b", "a@b"),
    ],
)
def test_tracker_rules_examples(rule: KeyRule, raw: str, expected: str) -> None:
    assert rule.rename(raw) == expected


def test_tracker_keys_note_names_the_renamed_keys_only() -> None:
    keys = TrackerKeys(MLFLOW_KEYS)
    values = {"actor/loss": 1.0, "val/a@1": 2.0, "val/b@1": 3.0, "val/c@1": 4.0, "val/d@1": 5.0}
    assert keys.rename(values) == {"actor/loss": 1.0, "val/a_at_1": 2.0, "val/b_at_1": 3.0, "val/c_at_1": 4.0,
                                   "val/d_at_1": 5.0}  # fmt: skip
    note = keys.note(values)
    assert note is not None
    assert note.startswith("mlflow receives 4 key(s) renamed: 'val/a@1' as 'val/a_at_1', 'val/b@1' as 'val/b_at_1', ")
    assert "and 1 more (MLflow metric names hold only" in note
    assert keys.note({"actor/loss": 1.0}) is None


def test_tracker_keys_keep_two_keys_that_one_rule_merges_apart() -> None:
    keys = TrackerKeys(MLFLOW_KEYS)
    first, second = keys.name("x/a_at_1"), keys.name("x/a@1")
    assert first == "x/a_at_1"
    assert second == "x/a_at_1_" + stable_hash("x/a@1")
    assert keys.name("x/a@1") == second


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a//b", "a/b"),
        ("/a/b/", "a/b"),
        ("a{b}=c,d@e:f\"g'h", "a_b__c_d_e_f_g_h"),
        ("a/./b", "a/_/b"),
        ("a/../b", "a/__/b"),
        ("a/.", "a/_"),
        ("..a/b", "a/b"),
        (".hidden", "hidden"),
        ("_step", "step_"),
        ("__private/x", "private/x"),
        ("step", "step_"),
        ("time", "time_"),
        ("window_start", "window_start_"),
        ("_notes", "notes"),
        ("a / b", "a/b"),
        ("  padded  ", "padded"),
        ("tab\there", "tab_here"),
        ("naïve/ключ", "na_ve/____"),
        ("a..b/c.", "a..b/c."),
    ],
)
def test_sanitize_key_examples(raw: str, expected: str) -> None:
    assert sanitize_key(raw) == expected
    assert_valid_everywhere(expected)


@pytest.mark.parametrize("raw", ["", "/", "//", "...", "@@@", " ", "_", "./."])
def test_sanitize_key_never_returns_empty(raw: str) -> None:
    key = sanitize_key(raw)
    assert key == f"unnamed_{stable_hash(raw)}"
    assert_valid_everywhere(key)


def test_long_keys_are_cut_with_a_hash_and_stay_distinct() -> None:
    common = "rollout/vllm/" + "x" * 300
    first, second = sanitize_key(common + "/a"), sanitize_key(common + "/b")
    assert len(first) == len(second) == MAX_KEY_LENGTH
    assert first != second
    assert first == common[: MAX_KEY_LENGTH - 9] + "_" + stable_hash(common + "/a")
    assert_valid_everywhere(first)
    assert_valid_everywhere(second)


def test_key_of_exactly_the_limit_is_kept() -> None:
    key = "a/" + "b" * (MAX_KEY_LENGTH - 2)
    assert sanitize_key(key) == key


def test_stable_hash_is_fixed() -> None:
    # SHA-256("actor/loss") starts with these digits; a change here would rename users' keys.
    assert stable_hash("actor/loss") == "3a955434"


# --- properties ---

_TRICKY = st.text(alphabet="./_ -:@{}=,\"'\\\n\tab", max_size=40)
_LONG = st.text(alphabet=st.characters(codec="ascii"), min_size=230, max_size=400)
_ANY_TEXT = st.one_of(st.text(), _TRICKY, _LONG)


@settings(max_examples=400, deadline=None)
@given(_ANY_TEXT)
def test_sanitized_keys_are_valid_for_every_backend(text: str) -> None:
    assert_valid_everywhere(sanitize_key(text))


@settings(max_examples=300, deadline=None)
@given(_ANY_TEXT)
def test_sanitize_key_is_idempotent_and_deterministic(text: str) -> None:
    key = sanitize_key(text)
    assert sanitize_key(key) == key
    assert sanitize_key(text) == key


_SEGMENT = st.from_regex(r"[a-z][a-z0-9_]{0,12}", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(st.lists(_SEGMENT, min_size=1, max_size=5))
def test_verl_style_keys_are_unchanged(segments: list[str]) -> None:
    key = "/".join(segments)
    if key in RESERVED_KEYS:
        return
    assert trainer_key(key) == key


@settings(max_examples=200, deadline=None)
@given(
    st.from_regex(r"[a-z_]{1,12}:[a-z_]{1,20}", fullmatch=True),
    st.sampled_from(["delta", "rate", "max", "last", "p99", "p99.9", None]),
    st.dictionaries(st.text(max_size=8), st.text(max_size=12), max_size=3),
)
def test_infra_keys_are_valid_for_every_backend(name: str, stat: str | None, group: dict[str, str]) -> None:
    assert_valid_everywhere(infra_key(name, stat, group))


def mlflow_validator_accepts(key: str) -> bool:
    """MLflow's own check of a metric name (``mlflow.utils.validation._validate_metric_name``)."""
    from mlflow.exceptions import MlflowException
    from mlflow.utils.validation import MAX_ENTITY_KEY_LENGTH, _validate_metric_name

    try:
        _validate_metric_name(key)
    except MlflowException:
        return False
    return len(key) <= MAX_ENTITY_KEY_LENGTH


@settings(max_examples=400, deadline=None)
@given(_ANY_TEXT)
def test_each_trackers_rule_gives_a_key_it_accepts_and_keeps_one_it_accepts(text: str) -> None:
    key = record_key(text)
    assert record_key(key) == key
    assert tensorboard_accepts(key)
    assert jsonl_accepts(key)
    mlflow_name = MLFLOW_KEYS.rename(key)
    assert mlflow_validator_accepts(mlflow_name), (key, mlflow_name)
    assert MLFLOW_KEYS.rename(mlflow_name) == mlflow_name
    if mlflow_validator_accepts(key) and "@" not in key:
        assert mlflow_name == key
    wandb_name = WANDB_KEYS.rename(key)
    assert wandb_accepts(wandb_name)
    assert wandb_name == key or not wandb_accepts(key)
    trackio_name = TRACKIO_KEYS.rename(key)
    assert trackio_name not in TRACKIO_RESERVED
    assert not trackio_name.startswith("__")
    assert trackio_name == key or key in TRACKIO_RESERVED or key.startswith("__")


# --- KeyRegistry ---


def test_registry_keeps_the_first_owner_and_disambiguates_the_second(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = KeyRegistry()
    first = registry.key_for("actor/loss@1", sanitize_key("actor/loss@1"))
    with caplog.at_level(logging.WARNING, logger="otel_bridge.exporters.naming"):
        second = registry.key_for("actor/loss:1", sanitize_key("actor/loss:1"))
        again = registry.key_for("actor/loss:1", sanitize_key("actor/loss:1"))
    assert first == "actor/loss_1"
    assert second == "actor/loss_1_" + stable_hash("actor/loss:1")
    assert again == second
    assert registry.key_for("actor/loss@1", "actor/loss_1") == first
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "'actor/loss@1'" in warnings[0].getMessage()
    assert "'actor/loss:1'" in warnings[0].getMessage()
    assert_valid_everywhere(second)


def test_registry_disambiguates_long_keys_within_the_limit() -> None:
    registry = KeyRegistry()
    long_a, long_b = "k" * 300 + "@", "k" * 300 + ":"
    key_a = registry.key_for(long_a, sanitize_key("k" * 300))
    key_b = registry.key_for(long_b, sanitize_key("k" * 300))
    assert key_a != key_b
    assert len(key_b) <= MAX_KEY_LENGTH
    assert_valid_everywhere(key_b)


def test_registry_handles_a_disambiguated_key_already_taken() -> None:
    registry = KeyRegistry()
    registry.key_for("a", "x")
    taken = "x_" + stable_hash("b")
    registry.key_for(taken, taken)
    key_b = registry.key_for("b", "x")
    assert key_b not in {"x", taken}
    assert key_b.startswith("x_")


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(alphabet="ab:@/ ._", max_size=6), min_size=1, max_size=30, unique=True))
def test_registry_gives_distinct_sources_distinct_keys(sources: list[str]) -> None:
    registry = KeyRegistry()
    keys = [registry.key_for(source, sanitize_key(source)) for source in sources]
    assert len(set(keys)) == len(sources)
    for key in keys:
        assert_valid_everywhere(key)


def test_registry_is_consistent_under_concurrent_use() -> None:
    registry = KeyRegistry()
    sources = [f"m{i % 50}{'@' if i % 2 else ':'}x" for i in range(200)]
    results: list[dict[str, str]] = [{} for _ in range(4)]
    barrier = threading.Barrier(4)

    def work(slot: int) -> None:
        barrier.wait()
        for source in sources if slot % 2 == 0 else reversed(sources):
            results[slot][source] = registry.key_for(source, sanitize_key(source))

    threads = [threading.Thread(target=work, args=(slot,)) for slot in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(result == results[0] for result in results)
    assert len(set(results[0].values())) == len(set(sources))
