"""PromQL building: name validation, string quoting (Go and JSON escape rules), combinators."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otel_bridge.errors import ConfigError
from otel_bridge.prometheus.promql import (
    duration,
    quote_label_value,
    regex_alternation,
    selector,
    tag_series,
    union,
    validate_label_name,
    validate_metric_name,
)

_GO_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}


def go_unquote(literal: str) -> str:
    """Decode a Go interpreted string literal, strictly following the Go specification.

    PromQL's lexer accepts exactly these escapes in double-quoted strings. Raises ``ValueError`` for
    anything Go would reject: a missing quote, a raw newline, an unescaped quote before the end (the
    literal would end early: a break-out), an unknown escape or an invalid code point.
    """
    if len(literal) < 2 or literal[0] != '"' or literal[-1] != '"':
        raise ValueError("not a double-quoted literal")
    out = bytearray()
    body = literal[1:-1]
    i = 0
    while i < len(body):
        char = body[i]
        if char == '"':
            raise ValueError(f"unescaped quote at {i + 1}: the literal ends early")
        if char == "\n":
            raise ValueError("raw newline in an interpreted string literal")
        if char != "\\":
            out += char.encode("utf-8")
            i += 1
            continue
        if i + 1 >= len(body):
            raise ValueError("dangling backslash")
        kind = body[i + 1]
        if kind in _GO_SIMPLE_ESCAPES:
            out += _GO_SIMPLE_ESCAPES[kind].encode()
            i += 2
        elif kind == '"':
            out += b'"'
            i += 2
        elif kind in "01234567":
            digits = body[i + 1 : i + 4]
            if len(digits) != 3 or any(d not in "01234567" for d in digits) or int(digits, 8) > 255:
                raise ValueError(f"bad octal escape {digits!r}")
            out.append(int(digits, 8))
            i += 4
        elif kind in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[kind]
            digits = body[i + 2 : i + 2 + width]
            if len(digits) != width or re.fullmatch(r"[0-9a-fA-F]+", digits) is None:
                raise ValueError(f"bad \\{kind} escape {digits!r}")
            code = int(digits, 16)
            if kind == "x":
                out.append(code)
            else:
                if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                    raise ValueError(f"escape \\{kind}{digits} is not a valid Unicode code point")
                out += chr(code).encode("utf-8")
            i += 2 + width
        else:
            raise ValueError(f"unknown escape \\{kind}")
    return out.decode("utf-8")


# --- names -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["up", "vllm:num_requests_running", "_private", ":colon_first", "a1_b2:c3"])
def test_valid_metric_names(name: str) -> None:
    assert validate_metric_name(name) == name


@pytest.mark.parametrize("name", ["", "1abc", "a-b", "a b", "a.b", "métrique", 'a"b', "a{b}"])
def test_invalid_metric_names(name: str) -> None:
    with pytest.raises(ConfigError, match="invalid Prometheus metric name") as caught:
        validate_metric_name(name)
    assert repr(name) in str(caught.value)


@pytest.mark.parametrize("name", ["job", "_x", "model_name", "A1"])
def test_valid_label_names(name: str) -> None:
    assert validate_label_name(name) == name


@pytest.mark.parametrize("name", ["", "1a", "a:b", "a-b", "ü", "a b"])
def test_invalid_label_names(name: str) -> None:
    with pytest.raises(ConfigError, match="invalid Prometheus label name"):
        validate_label_name(name)


@pytest.mark.parametrize("name", ["__name__", "__meta_x", "__"])
def test_reserved_label_names(name: str) -> None:
    with pytest.raises(ConfigError, match="reserved for Prometheus"):
        validate_label_name(name)


def test_non_string_names_are_rejected() -> None:
    with pytest.raises(ConfigError):
        validate_metric_name(3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        validate_label_name(None)  # type: ignore[arg-type]


# --- quoting ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        ("plain", '"plain"'),
        ("", '""'),
        ('say "hi"', r'"say \"hi\""'),
        ("C:\\path\\", r'"C:\\path\\"'),
        ("line1\nline2\r\t", r'"line1\nline2\r\t"'),
        ("\x00\x1f\x7f", r'"\u0000\u001f\u007f"'),
        ("\b\f", r'"\b\f"'),
        ("ünïcödé 日本 🙂", '"ünïcödé 日本 🙂"'),
        ('"} or vector(1) #', r'"\"} or vector(1) #"'),
        ("\\", r'"\\"'),
        ('\\"', r'"\\\""'),
    ],
)
def test_quote_label_value(value: str, literal: str) -> None:
    quoted = quote_label_value(value)
    assert quoted == literal
    assert go_unquote(quoted) == value
    assert json.loads(quoted) == value


def test_unpaired_surrogate_is_rejected() -> None:
    with pytest.raises(ConfigError, match="unpaired surrogate"):
        quote_label_value("a\ud800b")


@given(st.text())
def test_quoted_values_round_trip_under_go_and_json_rules(value: str) -> None:
    quoted = quote_label_value(value)
    assert "\n" not in quoted
    assert go_unquote(quoted) == value  # raises if an inner quote ended the literal early
    assert json.loads(quoted) == value


@given(st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True), st.text(), max_size=4))
def test_selector_values_cannot_break_out(matchers: dict[str, str]) -> None:
    built = selector("vllm:metric", matchers)
    if not matchers:
        assert built == "vllm:metric"
        return
    assert built.startswith("vllm:metric{")
    assert built.endswith("}")
    # Split the matcher list with a real string-literal scanner: each value must decode to the original.
    literal = r'"(?:[^"\\\n]|\\.)*"'
    pairs = re.findall(rf"([a-z][a-z0-9_]*)=({literal})", built[len("vllm:metric{") : -1])
    assert ",".join(f"{k}={v}" for k, v in pairs) == built[len("vllm:metric{") : -1]
    assert {k: go_unquote(v) for k, v in pairs} == matchers


# --- selectors and combinators ---------------------------------------------------------------------


def test_selector_sorts_and_quotes() -> None:
    assert selector("vllm:x", {"c": "d", "a": "b"}) == 'vllm:x{a="b",c="d"}'
    assert selector("up") == "up"
    assert selector("up", {}) == "up"
    assert selector("up", {"job": 'a"b'}) == r'up{job="a\"b"}'


def test_selector_rejects_bad_names() -> None:
    with pytest.raises(ConfigError, match="metric name"):
        selector("bad-name", {"a": "b"})
    with pytest.raises(ConfigError, match="label name"):
        selector("up", {"bad-label": "b"})
    with pytest.raises(ConfigError, match="reserved"):
        selector("up", {"__name__": "other"})


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (30.0, "30s"),
        (1.5, "1500ms"),
        (0.001, "1ms"),
        (12.345, "12345ms"),
        (60, "60s"),
        (1.0004, "1s"),
        (2.9996, "3s"),
        (3600.25, "3600250ms"),
    ],
)
def test_duration(seconds: float, text: str) -> None:
    assert duration(seconds) == text


@pytest.mark.parametrize("seconds", [0, 0.0004, -1.0, float("nan"), float("inf"), True])
def test_invalid_duration(seconds: float) -> None:
    with pytest.raises(ConfigError, match="duration"):
        duration(seconds)


def test_tag_series() -> None:
    assert tag_series("rate(x[1m])", "otel_metric", 'tok"ens') == (
        r'label_replace((rate(x[1m])), "otel_metric", "tok\"ens", "", "")'
    )
    with pytest.raises(ConfigError):
        tag_series("x", "__name__", "v")


def test_union() -> None:
    assert union(["a"]) == "(a)"
    assert union(["a", "b or c", "d"]) == "(a) or (b or c) or (d)"
    with pytest.raises(ConfigError, match="at least one"):
        union([])
    with pytest.raises(ConfigError, match="not a single string"):
        union("ab")


def test_regex_alternation() -> None:
    assert regex_alternation(["up", "vllm:num_requests_running"]) == '"up|vllm:num_requests_running"'
    with pytest.raises(ConfigError, match="metric name"):
        regex_alternation(["up", "a.b"])
    with pytest.raises(ConfigError, match="at least one"):
        regex_alternation([])
    with pytest.raises(ConfigError, match="not a single string"):
        regex_alternation("up")


@given(st.lists(st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,12}", fullmatch=True), min_size=1, max_size=5))
def test_regex_alternation_matches_exactly_the_names(names: list[str]) -> None:
    pattern = go_unquote(regex_alternation(names))
    for name in names:
        assert re.fullmatch(pattern, name)
    assert not any(re.fullmatch(pattern, name + "_suffix") for name in names if name + "_suffix" not in names)
