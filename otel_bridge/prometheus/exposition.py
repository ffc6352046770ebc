"""Parse Prometheus text exposition into typed metric families, fast when only a few are wanted.

Accepts the classic text format (``text/plain; version=0.0.4``) and the OpenMetrics text format (``# EOF``
terminator, counters typed without ``_total``, ``info`` families, exemplars).

Family names
------------
A family is keyed by the name users write in PromQL and in the otel-bridge config:

- counter: its sample name, which carries ``_total``. prometheus_client (and so vLLM) writes
  ``# TYPE vllm:generation_tokens_total counter``; OpenMetrics writes ``# TYPE foo counter`` with
  ``foo_total`` samples. Both give ``vllm:generation_tokens_total`` / ``foo_total``. A classic counter whose
  samples lack ``_total`` (``# TYPE foo counter`` then ``foo 3``) is keyed ``foo``.
- histogram, gaugehistogram, summary: the base name of the ``# TYPE`` line, e.g.
  ``vllm:time_to_first_token_seconds``; vLLM's odd ``vllm:iteration_tokens_total`` histogram keeps its name.
- info (OpenMetrics): the ``_info`` sample name.
- gauge, untyped, unknown, stateset: the name as written. Samples with no ``# TYPE`` line form an ``untyped``
  family named after the sample.

``_created`` samples are dropped, and so is a ``<base>_created`` gauge family that prometheus_client emits
next to the counter, histogram or summary ``<base>``: they are creation timestamps, not measurements.

Speed and strictness
--------------------
The text is cut at its ``# TYPE`` lines. The lines between two of them are routed by metric name; when they
all belong to an unwanted family they are skipped with one regex scan, otherwise they are parsed line by line
(labels, escapes, value, timestamp), so malformed lines of wanted families are always caught and those of
unwanted families only as far as their name. ``# TYPE`` lines are always checked; ``# HELP`` and other
comments are ignored. Malformed input raises :class:`ExpositionParseError` naming the line number and an
excerpt; no other exception type escapes :func:`parse_exposition`. Timestamps and exemplars are validated and
dropped. Quoted UTF-8 metric names (Prometheus 3 ``{"a.b"}`` syntax) are rejected.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal, get_args

from otel_bridge.errors import ExpositionParseError, SampleLimitError
from otel_bridge.prometheus_names import LABEL_NAME_PATTERN, METRIC_NAME_PATTERN
from otel_bridge.window import MetricKind

_log = logging.getLogger(__name__)
_SLICE_CHARS: Final = 1 << 18  # characters of exposition read in one regex pass (see _Parser._feed)

#: What a ``# TYPE`` line declares: one of the bridge's :data:`~otel_bridge.window.MetricKind` or another exposition
#: type (which the bridge parses but computes no window statistics for).
FamilyKind = Literal[MetricKind, "summary", "untyped", "info", "stateset", "gaugehistogram", "unknown"]
_KIND_BY_NAME: Final[dict[str, FamilyKind]] = {kind: kind for kind in get_args(FamilyKind)}

# Every pattern uses possessive quantifiers or disjoint character classes: matching is linear in the input.
# The text is parsed with a newline prepended, so every line, the first included, starts after a newline.
_NAME: Final = METRIC_NAME_PATTERN
_FLOAT: Final = r"[+-]?+(?:[0-9]++(?:\.[0-9]*+)?+|\.[0-9]++)(?:[eE][+-]?+[0-9]++)?+|[+-]?+(?i:inf(?:inity)?+)|(?i:nan)"
_FLOAT_RE: Final = re.compile(_FLOAT)
_NAME_RE: Final = re.compile(_NAME)
# A `# TYPE` line; the name and type groups are None when the line is malformed.
_TYPE_LINE_RE: Final = re.compile(
    rf"\n[ \t\r]*+#[ \t]++TYPE(?:[ \t]++({_NAME})[ \t]++([^ \t\r\n]++)[ \t\r]*+(?=\n|\Z))?+(?=[ \t\r\n]|\Z)"
)
_EOF_LINE_RE: Final = re.compile(r"\n[ \t\r]*+#[ \t]++EOF[ \t\r]*+(?=\n|\Z)")
# The first token of every line that is neither blank nor a comment: the metric name, or garbage.
_LINE_HEAD_RE: Final = re.compile(r"\n[ \t\r]*+([^# \t\r\n][^{ \t\r\n]*+)")
# Fast path over a run of lines: comments, blanks, and samples whose labels have no blanks or escapes (what
# exporters write). Groups: (the whole line with its newline, name, label block, value).
_SIMPLE_PAIR: Final = LABEL_NAME_PATTERN + r'="[^"\\\n]*+"'
_SIMPLE_PAIR_RE: Final = re.compile(rf'({LABEL_NAME_PATTERN})="([^"\\\n]*+)"')
_SIMPLE_LINE_RE: Final = re.compile(
    r"(\n(?:[ \t]*+#[^\n]*+|[ \t\r]*+(?=\n|\Z)|[ \t]*+"
    rf"({_NAME})(?:\{{((?:{_SIMPLE_PAIR}(?:,{_SIMPLE_PAIR})*+,?+)?+)\}})?+"
    rf"[ \t]++({_FLOAT})(?:[ \t]++(?:{_FLOAT}))?+[ \t\r]*+(?=\n|\Z)))"
)
# General path: one `name="escaped value"` pair with the blanks around it, then the value part of the line.
_LABEL_RE: Final = re.compile(r'[ \t]*+([a-zA-Z_][a-zA-Z0-9_]*+)[ \t]*+=[ \t]*+"([^"\\]*+(?:\\.[^"\\]*+)*+)"[ \t]*+')
_ESCAPE_RE: Final = re.compile(r"\\(.)")
_ESCAPES: Final[dict[str, str]] = {"\\": "\\", '"': '"', "n": "\n"}
_TAIL_RE: Final = re.compile(r"[ \t]++([^ \t#]++)(?:[ \t]++([^ \t#]++))?+[ \t]*+(#.*+)?+")
_EXCERPT_CHARS: Final = 80
_FORMAT_HINT: Final = (
    "expected Prometheus text exposition (https://prometheus.io/docs/instrumenting/exposition_formats/)"
)


@dataclass(frozen=True, slots=True)
class ExpositionSample:
    """One sample line: its full name (e.g. ``vllm:time_to_first_token_seconds_bucket``), labels and value.

    ``labels`` (read-only) includes ``le`` for histogram buckets and ``quantile`` for summaries, as raw strings.
    """

    name: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class ExpositionFamily:
    """A metric family keyed by its PromQL/config name (see the module docstring), samples in order."""

    name: str
    kind: FamilyKind
    samples: tuple[ExpositionSample, ...]


def parse_exposition(
    text: str, wanted: Collection[str] | None = None, *, max_samples: int | None = None
) -> dict[str, ExpositionFamily]:
    """Parse Prometheus/OpenMetrics text exposition into families keyed by PromQL/config name.

    ``wanted`` holds config-style names (counter with ``_total``, histogram base name, gauge name); families
    not in it are skipped cheaply, and wanted names absent from ``text`` are simply absent from the result.
    ``wanted=None`` keeps every family. Raises :class:`ExpositionParseError` (line number and excerpt in the
    message) for malformed input, and for a family whose lines are not one contiguous group. Past ``max_samples`` kept
    samples, :class:`SampleLimitError`.
    """
    parser = _Parser(None if wanted is None else frozenset(wanted), max_samples)
    families = parser.run("\n" + text)
    _log.debug("parsed %d families from %d characters of exposition", len(families), len(text))
    return families


@dataclass(slots=True)
class _Group:
    """The family whose lines are being read: which sample names belong to it and whether to keep them."""

    type_name: str
    kind: FamilyKind
    members: frozenset[str]
    created: frozenset[str]
    allowed: frozenset[str]  # members and created
    keep: bool
    samples: list[ExpositionSample]
    seen: set[tuple[str, frozenset[tuple[str, str]]]]


def _error(lineno: int, line: str, what: str) -> ExpositionParseError:
    line = line.strip(" \t\r")
    excerpt = line if len(line) <= _EXCERPT_CHARS else line[:_EXCERPT_CHARS] + "..."
    return ExpositionParseError(f"line {lineno}: {what}: {excerpt!r}; {_FORMAT_HINT}")


@functools.lru_cache(maxsize=4096)
def _sample_names(type_name: str, kind: FamilyKind) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """Sample names of a ``# TYPE type_name kind`` family: (members, ``_created`` names, both)."""
    t = type_name
    members: set[str] = {t}
    created: set[str] = set()
    if kind == "counter":
        members.add(t + "_total")
        created.add(t + "_created")
        if t.endswith("_total"):
            created.add(t[: -len("_total")] + "_created")
    elif kind == "histogram":
        members = {t + "_bucket", t + "_count", t + "_sum"}
        created.add(t + "_created")
    elif kind == "gaugehistogram":
        members = {t + "_bucket", t + "_gcount", t + "_gsum"}
    elif kind == "summary":
        members.update((t + "_count", t + "_sum"))
        created.add(t + "_created")
    elif kind == "info":
        members = {t + "_info"}
    return frozenset(members), frozenset(created), frozenset(members | created)


@functools.lru_cache(maxsize=16384)
def _simple_labels(block: str) -> tuple[Mapping[str, str], frozenset[tuple[str, str]]] | None:
    """Labels of a validated simple label block, as a read-only mapping and a set; None if a name repeats.

    Cached: a scraped endpoint repeats the same label blocks at every scrape.
    """
    pairs = _SIMPLE_PAIR_RE.findall(block)
    labels = dict(pairs)
    if len(labels) != len(pairs):
        return None
    return MappingProxyType(labels), frozenset(pairs)


def _is_wanted(type_name: str, kind: FamilyKind, wanted: frozenset[str] | None) -> bool:
    if wanted is None:
        return True
    if kind == "counter":
        return type_name in wanted or type_name + "_total" in wanted
    if kind == "info":
        return type_name + "_info" in wanted
    return type_name in wanted


def _family_name(group: _Group) -> str:
    if group.kind == "counter":
        if group.type_name.endswith("_total"):
            return group.type_name
        # OpenMetrics `foo` with `foo_total` samples, or a classic counter whose only sample name is `foo`.
        if group.samples and group.samples[0].name == group.type_name:
            return group.type_name
        return group.type_name + "_total"
    if group.kind == "info":
        return group.type_name + "_info"
    return group.type_name


def _is_created_gauge(name: str, type_kinds: Mapping[str, FamilyKind]) -> bool:
    """True for a ``<base>_created`` gauge whose base is a counter, histogram or summary in the same text."""
    if not name.endswith("_created"):
        return False
    base = name[: -len("_created")]
    return type_kinds.get(base) in ("counter", "histogram", "summary") or type_kinds.get(base + "_total") == "counter"


def _unescape(raw: str, lineno: int, line: str) -> str:
    def replace(match: re.Match[str]) -> str:
        char = match.group(1)
        if char not in _ESCAPES:
            raise _error(lineno, line, f"invalid escape '\\{char}' in a label value (allowed: \\\\, \\\", \\n)")
        return _ESCAPES[char]

    return _ESCAPE_RE.sub(replace, raw)


def _parse_number(token: str, lineno: int, line: str, what: str) -> float:
    if _FLOAT_RE.fullmatch(token) is None:
        raise _error(lineno, line, f"{what} {token!r} is not a number")
    return float(token)


def _parse_labels_and_value(line: str, name_end: int, lineno: int) -> tuple[dict[str, str], float]:
    """Labels and value of a stripped sample line whose metric name ends at ``name_end``.

    The general path (blanks, escapes, exemplars, every error); ``_Parser._feed_simple`` is the fast one.
    """
    labels: dict[str, str] = {}
    size = len(line)
    pos = name_end
    while pos < size and line[pos] in " \t":
        pos += 1
    if pos < size and line[pos] == "{":
        pos += 1
        while True:
            while pos < size and line[pos] in " \t":
                pos += 1
            if pos < size and line[pos] == "}":
                pos += 1
                break
            match = _LABEL_RE.match(line, pos)
            if match is None:
                raise _error(lineno, line, f'malformed label at column {pos + 1}: expected name="escaped value"')
            key, value = match.group(1), match.group(2)
            if "\\" in value:
                value = _unescape(value, lineno, line)
            if key in labels:
                raise _error(lineno, line, f"label {key!r} appears twice")
            labels[key] = value
            pos = match.end()
            if pos < size and line[pos] == ",":
                pos += 1
            elif pos < size and line[pos] == "}":
                pos += 1
                break
            else:
                raise _error(lineno, line, f"expected ',' or '}}' after a label at column {pos + 1}")
    else:
        pos = name_end
    tail = _TAIL_RE.fullmatch(line, pos)
    if tail is None:
        raise _error(lineno, line, "expected a blank, the value and an optional timestamp after the metric")
    value_token, timestamp_token, exemplar = tail.group(1, 2, 3)
    if exemplar is not None and not exemplar.startswith("# {"):
        raise _error(lineno, line, "text after the value must be an OpenMetrics exemplar '# {labels} value'")
    value = _parse_number(value_token, lineno, line, "value")
    if timestamp_token is not None:
        _parse_number(timestamp_token, lineno, line, "timestamp")
    return labels, value


class _Parser:
    """One parse: the current family group, every family so far, and the families kept."""

    def __init__(self, wanted: frozenset[str] | None, max_samples: int | None = None) -> None:
        self._wanted = wanted
        self._limit = max_samples or 0
        self._room: float = max_samples or math.inf  # samples that may still be kept
        self._families: dict[str, ExpositionFamily] = {}
        self._type_kinds: dict[str, FamilyKind] = {}
        self._claimed: dict[str, int] = {}  # type and sample names of every family so far -> its first line
        self._group: _Group | None = None

    def run(self, body: str) -> dict[str, ExpositionFamily]:
        """Parse ``body``, the exposition with a newline prepended so that every line follows a newline."""
        body = self._cut_at_eof(body)
        pos = 0  # body[pos] is the newline before the next line to read
        lineno = 0  # number of the line that ends at body[pos]
        for match in _TYPE_LINE_RE.finditer(body):
            chunk = body[pos : match.start()]
            if chunk:
                self._feed(chunk, lineno)
                lineno += chunk.count("\n")
            lineno += 1
            name, kind_token = match.group(1, 2)
            if name is None:
                pos = body.find("\n", match.end())
                line = body[match.start() + 1 : None if pos == -1 else pos]
                raise _error(lineno, line, "a TYPE line must be '# TYPE <metric name> <type>'")
            pos = match.end()
            kind = _KIND_BY_NAME.get(kind_token)
            if kind is None:
                line = body[match.start() + 1 : pos]
                allowed = ", ".join(_KIND_BY_NAME)
                raise _error(lineno, line, f"unknown metric type {kind_token!r} (allowed: {allowed})")
            self._close()
            self._open(name, kind, lineno, body[match.start() + 1 : pos])
            self._type_kinds[name] = kind
        self._feed(body[pos:], lineno)
        self._close()
        for name in [n for n, f in self._families.items() if f.kind == "gauge"]:
            if _is_created_gauge(name, self._type_kinds):
                del self._families[name]
        return self._families

    @staticmethod
    def _cut_at_eof(body: str) -> str:
        if "EOF" not in body:  # a substring search: many times faster than the regex over a large page
            return body
        eof = _EOF_LINE_RE.search(body)
        if eof is None:
            return body
        rest = body[eof.end() :]
        if rest.strip(" \t\r\n"):
            eof_lineno = body.count("\n", 0, eof.start() + 1)
            after = rest.lstrip(" \t\r\n")
            lineno = eof_lineno + rest.count("\n", 0, len(rest) - len(after))
            what = f"content after the OpenMetrics '# EOF' of line {eof_lineno}"
            raise _error(lineno, after.split("\n", 1)[0], what)
        return body[: eof.start()]

    def _feed(self, chunk: str, lineno: int) -> None:
        """Read the lines of ``chunk`` (it starts with the newline ending line ``lineno``) in slices: a regex pass holds
        the GIL briefly (the trainer's thread runs in between), and the sample cap stops the reading early."""
        start = 0
        while len(chunk) - start > _SLICE_CHARS:
            end = chunk.find("\n", start + _SLICE_CHARS)
            if end == -1:
                break
            self._feed_slice(chunk[start:end], lineno)
            lineno += chunk.count("\n", start, end)
            start = end
        self._feed_slice(chunk[start:] if start else chunk, lineno)

    def _feed_slice(self, chunk: str, lineno: int) -> None:
        group = self._group
        if group is not None:
            if not group.keep:
                if group.allowed.issuperset(_LINE_HEAD_RE.findall(chunk)):
                    return
            elif self._feed_simple(chunk, group):
                return
        for offset, line in enumerate(chunk.split("\n")):
            if offset:
                self._line(line.strip(" \t\r"), lineno + offset)

    def _feed_simple(self, chunk: str, group: _Group) -> bool:
        """Parse ``chunk`` in one regex pass if it is all simple lines of ``group``; False (and no change) if not."""
        lines = _SIMPLE_LINE_RE.findall(chunk)
        if sum(len(line[0]) for line in lines) != len(chunk):
            return False
        members = group.members
        if len(lines) > self._room and sum(1 for line in lines if line[1] in members) > self._room:
            raise SampleLimitError(self._limit)  # before any sample object is built
        samples: list[ExpositionSample] = []
        keys: set[tuple[str, frozenset[tuple[str, str]]]] = set()
        for _, name, block, value in lines:
            if not name:
                continue
            if name not in members:
                if name in group.created:
                    continue
                return False
            parsed = _simple_labels(block)
            if parsed is None:
                return False
            labels, label_set = parsed
            key = (name, label_set)
            if key in keys:
                return False
            keys.add(key)
            samples.append(ExpositionSample(name, labels, float(value)))
        if not keys.isdisjoint(group.seen):
            return False
        self._room -= len(samples)  # the check above: never below 0
        group.seen.update(keys)
        group.samples.extend(samples)
        return True

    def _line(self, line: str, lineno: int) -> None:
        if not line or line[0] == "#":
            return
        name_match = _NAME_RE.match(line)
        if name_match is None:
            what = "quoted metric names are not supported" if line[0] == "{" else "expected a metric name"
            raise _error(lineno, line, what)
        name = name_match.group()
        group = self._group
        if group is None or name not in group.allowed:
            self._close()
            group = self._open(name, "untyped", lineno, line)
        if not group.keep:
            return
        labels, value = _parse_labels_and_value(line, name_match.end(), lineno)
        if name in group.created:
            return
        key = (name, frozenset(labels.items()))
        if key in group.seen:
            raise _error(lineno, line, "duplicate sample (same name and labels as an earlier line)")
        if self._room < 1:
            raise SampleLimitError(self._limit)
        self._room -= 1
        group.seen.add(key)
        group.samples.append(ExpositionSample(name, MappingProxyType(labels), value))

    def _open(self, type_name: str, kind: FamilyKind, lineno: int, line: str) -> _Group:
        members, created, allowed = _sample_names(type_name, kind)
        claims = (type_name, *members)
        for claim in claims:
            if claim in self._claimed:
                raise _error(
                    lineno,
                    line,
                    f"{claim!r} already belongs to the family that started at line {self._claimed[claim]}; "
                    "the lines of a family must form one group with at most one TYPE line",
                )
        for claim in claims:
            self._claimed[claim] = lineno
        keep = _is_wanted(type_name, kind, self._wanted)
        if keep and kind == "gauge" and _is_created_gauge(type_name, self._type_kinds):
            keep = False
        self._group = _Group(type_name, kind, members, created, allowed, keep, [], set())
        return self._group

    def _close(self) -> None:
        group = self._group
        if group is not None and group.keep:
            name = _family_name(group)
            if self._wanted is None or name in self._wanted:
                self._families[name] = ExpositionFamily(name, group.kind, tuple(group.samples))
        self._group = None
