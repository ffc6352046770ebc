"""parse_exposition: family naming and kinds on the real vLLM capture, filtering, strictness, fuzzing."""

from __future__ import annotations

import contextlib
import math
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from otel_bridge.errors import ExpositionParseError
from otel_bridge.prometheus.exposition import ExpositionFamily, parse_exposition

CAPTURE_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "vllm"

SeriesKey = tuple[str, frozenset[tuple[str, str]]]


@pytest.fixture(scope="module")
def capture_dir() -> Path:
    if not (CAPTURE_DIR / "metrics-after-requests.txt").is_file():
        pytest.fail(f"the real vLLM captures are missing from {CAPTURE_DIR}")
    return CAPTURE_DIR


@pytest.fixture(scope="module")
def capture(capture_dir: Path) -> str:
    return (capture_dir / "metrics-after-requests.txt").read_text(encoding="utf-8")


def independent_parse(text: str) -> tuple[dict[str, str], dict[SeriesKey, float]]:
    """A deliberately naive reader for well-formed exposition: ({TYPE name: type}, {(sample, labels): value})."""
    types: dict[str, str] = {}
    values: dict[SeriesKey, float] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
        elif line and not line.startswith("#"):
            head, value = line.rsplit(" ", 1)
            name, _, labels = head.partition("{")
            pairs = frozenset(re.findall(r'(\w+)="([^"]*)"', labels))
            values[(name, pairs)] = float(value)
    return types, values


def flatten(families: dict[str, ExpositionFamily]) -> dict[SeriesKey, float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in families.values()
        for sample in family.samples
    }


def wanted_names(capture_dir: Path) -> dict[str, str]:
    """metric-names.txt's `vllm:` families without the `_created` gauges: {name: type}."""
    names = {}
    for line in (capture_dir / "metric-names.txt").read_text(encoding="utf-8").splitlines():
        match = re.fullmatch(r"# TYPE (vllm:\S+) (\w+)", line)
        if match and not match.group(1).endswith("_created"):
            names[match.group(1)] = match.group(2)
    return names


# --- the real vLLM capture ---------------------------------------------------------------------------------


def test_every_vllm_family_of_the_capture_has_its_config_name_and_kind(capture_dir: Path, capture: str) -> None:
    expected = wanted_names(capture_dir)
    assert len(expected) == 39
    families = parse_exposition(capture)
    vllm = {name: family.kind for name, family in families.items() if name.startswith("vllm:")}
    assert vllm == expected
    assert families["vllm:generation_tokens_total"].kind == "counter"
    assert families["vllm:time_to_first_token_seconds"].kind == "histogram"
    assert families["vllm:iteration_tokens_total"].kind == "histogram"
    assert not [name for name in families if name.endswith("_created")]


def test_sample_values_match_an_independent_parse(capture: str) -> None:
    _, expected = independent_parse(capture)
    expected = {key: value for key, value in expected.items() if not key[0].endswith("_created")}
    assert flatten(parse_exposition(capture)) == expected


def test_kinds_and_values_agree_with_prometheus_client(capture: str) -> None:
    reference: dict[SeriesKey, float] = {}
    for family in text_string_to_metric_families(capture):
        for sample in family.samples:
            if not sample.name.endswith("_created"):
                reference[(sample.name, frozenset(sample.labels.items()))] = float(sample.value)
    assert flatten(parse_exposition(capture)) == reference


def test_histogram_samples_keep_le_and_order(capture: str) -> None:
    ttft = parse_exposition(capture, ["vllm:time_to_first_token_seconds"])["vllm:time_to_first_token_seconds"]
    buckets = [s for s in ttft.samples if s.name.endswith("_bucket")]
    assert [s.labels["le"] for s in buckets][:3] == ["0.001", "0.005", "0.01"]
    assert buckets[-1].labels["le"] == "+Inf"
    count = next(s.value for s in ttft.samples if s.name == "vllm:time_to_first_token_seconds_count")
    assert buckets[-1].value == count == 20.0
    assert dict(buckets[0].labels) == {"engine": "0", "le": "0.001", "model_name": "tiny"}


def test_wanted_keeps_only_the_wanted_families_with_identical_samples(capture_dir: Path, capture: str) -> None:
    everything = parse_exposition(capture)
    names = sorted(wanted_names(capture_dir))
    wanted = [*names[::2], "vllm:does_not_exist", "process_cpu_seconds_total"]
    subset = parse_exposition(capture, wanted)
    assert set(subset) == (set(names[::2]) | {"process_cpu_seconds_total"})
    assert subset == {name: everything[name] for name in subset}
    assert parse_exposition(capture, []) == {}


def test_blanks_inside_labels_give_the_same_result_as_the_compact_form(capture: str) -> None:
    # Compact lines take the one-regex fast path; blanks force the line-by-line general path.
    spaced = re.sub(r'",(?=[a-zA-Z_])', '" , ', capture).replace("{", " { ")
    assert spaced != capture
    assert parse_exposition(spaced) == parse_exposition(capture)
    wanted = ["vllm:request_success_total", "vllm:e2e_request_latency_seconds", "vllm:cache_config_info"]
    assert parse_exposition(spaced, wanted) == parse_exposition(capture, wanted)


def test_the_before_requests_capture_has_every_family_at_zero(capture_dir: Path) -> None:
    text = (capture_dir / "metrics-before-requests.txt").read_text(encoding="utf-8")
    families = parse_exposition(text, wanted_names(capture_dir))
    assert len(families) == 39
    assert families["vllm:generation_tokens_total"].samples[0].value == 0.0
    assert families["vllm:engine_sleep_state"].samples[0].labels["sleep_state"] == "awake"


# --- naming rules and formats ------------------------------------------------------------------------------


def test_openmetrics_counter_info_created_and_eof() -> None:
    text = (
        "# TYPE foo counter\n"
        "# HELP foo Foos.\n"
        'foo_total{a="1"} 3.0\n'
        'foo_created{a="1"} 1.7e9\n'
        "# TYPE build info\n"
        'build_info{version="1.2"} 1\n'
        "# TYPE lat histogram\n"
        'lat_bucket{le="0.5"} 1 # {trace_id="abc"} 0.4 1.7e9\n'
        'lat_bucket{le="+Inf"} 2\n'
        "lat_count 2\n"
        "lat_sum 1.5\n"
        "lat_created 1.7e9\n"
        "# EOF\n"
    )
    families = parse_exposition(text)
    assert set(families) == {"foo_total", "build_info", "lat"}
    assert families["foo_total"].kind == "counter"
    assert [(s.name, dict(s.labels), s.value) for s in families["foo_total"].samples] == [
        ("foo_total", {"a": "1"}, 3.0)
    ]
    assert families["build_info"].kind == "info"
    assert [s.name for s in families["lat"].samples] == ["lat_bucket", "lat_bucket", "lat_count", "lat_sum"]
    assert parse_exposition(text, ["foo_total"]).keys() == {"foo_total"}
    assert parse_exposition(text, ["foo"]) == {}


def test_classic_counter_without_total_suffix_keeps_its_sample_name() -> None:
    families = parse_exposition("# TYPE requests counter\nrequests 7\n")
    assert families["requests"].kind == "counter"
    assert families["requests"].samples[0].value == 7.0
    assert parse_exposition("# TYPE requests counter\nrequests 7\n", ["requests_total"]) == {}


def test_created_gauges_are_dropped_only_next_to_their_counter_histogram_or_summary() -> None:
    text = (
        "# TYPE jobs_total counter\njobs_total 1\n"
        "# TYPE jobs_created gauge\njobs_created 1.7e9\n"
        "# TYPE cache_created gauge\ncache_created 5\n"
    )
    assert set(parse_exposition(text)) == {"jobs_total", "cache_created"}


def test_samples_without_type_are_untyped_families_and_summaries_keep_quantiles() -> None:
    text = (
        "up 1\n"
        'temperature{room="a"} 20.5\n'
        'temperature{room="b"} -3e2\n'
        "# TYPE rpc summary\n"
        'rpc{quantile="0.5"} 0.1\n'
        "rpc_count 4\n"
        "rpc_sum 0.9\n"
    )
    families = parse_exposition(text)
    assert {name: f.kind for name, f in families.items()} == {
        "up": "untyped",
        "temperature": "untyped",
        "rpc": "summary",
    }
    assert [s.value for s in families["temperature"].samples] == [20.5, -300.0]
    assert families["rpc"].samples[0].labels == {"quantile": "0.5"}


def test_label_escapes_blanks_timestamps_and_special_values() -> None:
    text = (
        "# TYPE g gauge\n"
        'g{path="C:\\\\dir",msg="say \\"hi\\"\\nbye", empty=""} +Inf 1700000000000\n'
        '  g { a = "x" , } NaN\r\n'
        'g{b="}{,#"}\t-inf\n'
        "g 1e-3 \n"
    )
    samples = parse_exposition(text)["g"].samples
    assert dict(samples[0].labels) == {"path": "C:\\dir", "msg": 'say "hi"\nbye', "empty": ""}
    assert samples[0].value == math.inf
    assert dict(samples[1].labels) == {"a": "x"}
    assert math.isnan(samples[1].value)
    assert dict(samples[2].labels) == {"b": "}{,#"}
    assert samples[2].value == -math.inf
    assert samples[3].labels == {}
    assert samples[3].value == 0.001


@given(
    st.dictionaries(
        st.sampled_from(["a", "b", "le_x", "_hidden"]),
        st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20),
        max_size=3,
    ),
    st.floats(allow_nan=False),
)
@settings(max_examples=200, deadline=None)
def test_label_values_round_trip_through_prometheus_client(labels: dict[str, str], value: float) -> None:
    registry = CollectorRegistry()
    gauge = Gauge("roundtrip", "Any label values.", sorted(labels), registry=registry)
    (gauge.labels(**labels) if labels else gauge).set(value)
    counter = Counter("events", "A counter.", registry=registry)
    counter.inc(2)
    families = parse_exposition(generate_latest(registry).decode("utf-8"))
    [sample] = families["roundtrip"].samples
    assert dict(sample.labels) == labels
    assert sample.value == value
    assert families["events_total"].samples[0].value == 2.0


# --- strictness --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("# TYPE g gauge\ng{a=1} 2\n", 2, "malformed label"),
        ('# TYPE g gauge\ng{a="1" b="2"} 2\n', 2, "expected ','"),
        ('# TYPE g gauge\ng{a="1",a="2"} 2\n', 2, "appears twice"),
        ('# TYPE g gauge\ng{a="\\t"} 2\n', 2, "invalid escape"),
        ('# TYPE g gauge\ng{a="1"}\n', 2, "expected a blank"),
        ("# TYPE g gauge\ng two\n", 2, "is not a number"),
        ("# TYPE g gauge\ng 1_000\n", 2, "is not a number"),
        ("# TYPE g gauge\ng 1 2 3\n", 2, "expected a blank"),
        ("# TYPE g gauge\ng 1 soon\n", 2, "timestamp"),
        ("# TYPE g gauge\ng 1 #x\n", 2, "exemplar"),
        ("\n\n# TYPE g\n", 3, "TYPE line must be"),
        ("# TYPE g gauge extra\n", 1, "TYPE line must be"),
        ("# TYPE g gaug\n", 1, "unknown metric type"),
        ("# TYPE 1g gauge\n", 1, "TYPE line must be"),
        ('{"utf8.name"} 1\n', 1, "quoted metric names"),
        ("= 1\n", 1, "expected a metric name"),
        ("# TYPE g gauge\ng 1\ng 2\n", 3, "duplicate sample"),
        ("# TYPE g gauge\ng 1\n# TYPE h gauge\nh 1\ng 2\n", 5, "already belongs"),
        ("# TYPE g gauge\ng 1\n# TYPE g gauge\n", 3, "already belongs"),
        ("x 1\n# TYPE x gauge\n", 2, "already belongs"),
        ("# TYPE h histogram\nh_count 1\n# TYPE h_count gauge\n", 3, "already belongs"),
        ("g 1\n# EOF\n\ng 2\n", 4, "after the OpenMetrics '# EOF' of line 2"),
    ],
)
def test_malformed_input_raises_with_line_number(text: str, line: int, fragment: str) -> None:
    with pytest.raises(ExpositionParseError) as info:
        parse_exposition(text)
    assert f"line {line}:" in str(info.value)
    assert fragment in str(info.value)


def test_error_message_carries_a_short_excerpt() -> None:
    with pytest.raises(ExpositionParseError) as info:
        parse_exposition("# TYPE g gauge\ng{a=1} " + "9" * 500 + "\n")
    message = str(info.value)
    assert "'g{a=1} 9999" in message
    assert "...'" in message
    assert len(message) < 400


def test_lines_of_unwanted_families_are_only_checked_as_far_as_their_name() -> None:
    text = "# TYPE broken gauge\nbroken{a=1} x\n# TYPE ok gauge\nok 1\n"
    assert parse_exposition(text, ["ok"])["ok"].samples[0].value == 1.0
    with pytest.raises(ExpositionParseError, match="line 2:"):
        parse_exposition(text)
    with pytest.raises(ExpositionParseError, match="line 2:"):
        parse_exposition("# TYPE skipped gauge\n{bad 1\n# TYPE ok gauge\nok 1\n", ["ok"])


def test_a_stray_sample_inside_an_unwanted_family_is_still_found() -> None:
    text = "# TYPE skipped gauge\nskipped 1\nwanted_untyped 2\nskipped_other 3\n"
    families = parse_exposition(text, ["wanted_untyped"])
    assert list(families) == ["wanted_untyped"]
    assert families["wanted_untyped"].kind == "untyped"


def test_very_long_lines_parse_in_linear_time() -> None:
    blanks = " " * 200_000
    assert parse_exposition(f"g{blanks}1{blanks}\n")["g"].samples[0].value == 1.0
    with pytest.raises(ExpositionParseError):
        parse_exposition("g{" + 'a="' + "\\" * 100_001 + "\n")
    with pytest.raises(ExpositionParseError):
        parse_exposition("g" + " 1" * 100_000 + "\n")


# --- fuzzing -----------------------------------------------------------------------------------------------

_SYNTAX = st.lists(
    st.sampled_from([*'{}"=,\\ \t\n\r#_:le+-.0123456789abcdefgEINTYPHLOFinf', "# TYPE ", "# EOF\n"]),
    max_size=60,
).map("".join)


@given(st.text(max_size=300))
@settings(max_examples=300, deadline=None)
def test_arbitrary_text_parses_or_raises_exposition_parse_error(text: str) -> None:
    with contextlib.suppress(ExpositionParseError):
        parse_exposition(text)


@given(st.lists(_SYNTAX, max_size=5).map("\n".join), st.sampled_from([None, ["g"], ["g_total", "h"]]))
@settings(max_examples=300, deadline=None)
def test_syntax_soup_parses_or_raises_exposition_parse_error(text: str, wanted: list[str] | None) -> None:
    with contextlib.suppress(ExpositionParseError):
        parse_exposition("# TYPE g gauge\n" + text, wanted)


_MUTATION = st.tuples(
    st.sampled_from(["insert", "delete", "replace", "duplicate_line", "drop_line"]),
    st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
    _SYNTAX.filter(bool),
)


@given(st.lists(_MUTATION, min_size=1, max_size=4), st.integers(min_value=0, max_value=3))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_mutated_capture_parses_or_raises_and_filtering_agrees_with_a_full_parse(
    capture_dir: Path, capture: str, mutations: list[tuple[str, float, str]], subset_index: int
) -> None:
    text = capture
    for kind, where, chunk in mutations:
        pos = int(where * len(text))
        if kind == "insert":
            text = text[:pos] + chunk + text[pos:]
        elif kind == "delete":
            text = text[:pos] + text[pos + len(chunk) :]
        elif kind == "replace":
            text = text[:pos] + chunk + text[pos + len(chunk) :]
        else:
            lines = text.split("\n")
            index = int(where * len(lines))
            lines[index:index] = [lines[index]] if kind == "duplicate_line" else []
            if kind == "drop_line":
                del lines[index]
            text = "\n".join(lines)
    names = sorted(wanted_names(capture_dir))
    wanted = names[subset_index::4]
    try:
        full = parse_exposition(text)
    except ExpositionParseError:
        full = None
    try:
        subset = parse_exposition(text, wanted)
    except ExpositionParseError:
        # A subset may only fail where the full parse fails too.
        assert full is None
        return
    if full is not None:
        assert subset == {name: family for name, family in full.items() if name in wanted}
