"""Tracker key naming: every rule that turns a metric into a tracker key lives here.

A tracker key is a ``/``-separated path such as ``rollout/vllm/generation_tokens_total/delta`` or
``actor/loss``. Two kinds of keys, two sets of rules:

**The trainer's keys** (``bridge.log()``, verl's and the integrations' dicts) reach every tracker that accepts them
unchanged: ``val-core/gsm8k/reward/mean@1`` stays ``mean@1`` in the record, in JSONL, TensorBoard, wandb and the
console, so a run compares with one logged by verl's own ``Tracking``. :func:`trainer_key` only changes what no tracker
should receive (see :func:`record_key`). A tracker that cannot take a key gets it renamed by its :class:`KeyRule`, and
the record's notes say which keys that tracker received under which name:

- MLflow (:data:`MLFLOW_KEYS`) accepts ``^[/\\w.\\- :]*$`` (no ``:`` on Windows), at most 250 characters, and
  names that ``posixpath.normpath`` leaves alone: ``@`` becomes ``_at_`` (what verl's own MLflow logger writes), any
  other character outside that set ``_``, empty segments are dropped and a segment of dots becomes as many ``_``;
- wandb (:data:`WANDB_KEYS`) reserves keys starting with ``_`` for its own fields (``_step``, ``_runtime``): the
  leading ``_`` are dropped; a ``*`` before the key's last character becomes ``_`` (``define_metric`` takes a glob
  suffix only);
- trackio (:data:`TRACKIO_KEYS`) uses ``project``, ``run``, ``timestamp``, ``step``, ``time`` and ``metrics`` in its
  rows (they get a trailing ``_``) and keys starting with ``__`` (their leading ``_`` are dropped).

**The bridge's own keys** (infrastructure, phase, instrument and health keys) are built from metric and label names,
and :func:`sanitize_key` makes them valid for every backend we ship or plan to ship, with the rules, in this order:

1. every character outside ``[A-Za-z0-9_\\-./ ]`` becomes ``_``;
2. leading ``_``, ``.``, ``/`` and spaces are dropped;
3. empty segments are dropped (no ``//``, no leading or trailing ``/``), spaces around segments are
   stripped, and a segment made only of dots becomes as many ``_``;
4. an empty result becomes ``unnamed_<hash>``; a result equal to a JSONL record field gets a trailing ``_``;
5. a result longer than 250 characters is cut and ends with ``_<hash>`` (8 hex digits of a SHA-256 of the
   original text), so two long keys that share their first 241 characters stay distinct.

The suffixes use ``_`` rather than ``~`` because MLflow rejects ``~``.
"""

from __future__ import annotations

import hashlib
import logging
import re
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from otel_bridge.errors import ConfigError

_log = logging.getLogger(__name__)

MAX_KEY_LENGTH: Final = 250
"""The longest key any backend accepts (MLflow's limit)."""

RESERVED_KEYS: Final = frozenset({"step", "time", "window_start", "_notes"})
"""Keys the JSONL backend uses for the record's own fields."""

_HASH_DIGITS: Final = 8
_SUFFIX_LENGTH: Final = 1 + _HASH_DIGITS
_FORBIDDEN_CHARS: Final = re.compile(r"[^A-Za-z0-9_\-./ ]")
_CONTROL_CHARS: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
"""Control characters (terminal escape sequences, newlines) and lone surrogates (not UTF-8): no tracker gets them."""
MLFLOW_NAME: Final = re.compile(r"^[/\w.\- ]+$" if sys.platform == "win32" else r"^[/\w.\- :]+$")
"""The characters MLflow accepts in a metric name (``mlflow.utils.validation``: ``:`` too, except on Windows)."""
_MLFLOW_FORBIDDEN: Final = re.compile(r"[^/\w.\- ]" if sys.platform == "win32" else r"[^/\w.\- :]")


def stable_hash(text: str) -> str:
    """8 hex digits of a SHA-256 of ``text``: the same in every process and on every machine."""
    digest = hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()
    return digest[:_HASH_DIGITS]


def sanitize_key(key: str) -> str:
    """Return ``key`` made valid for every tracker backend (see the module docstring for the rules).

    Valid keys come back unchanged, so the function is idempotent.
    """
    text = _FORBIDDEN_CHARS.sub("_", key).lstrip("_. /")
    segments: list[str] = []
    for raw in text.split("/"):
        segment = raw.strip(" ")
        if not segment:
            continue
        if segment.strip(".") == "":
            segment = "_" * len(segment)
        segments.append(segment)
    return _finish("/".join(segments), key)


def _finish(text: str, key: str) -> str:
    """``text`` (named from ``key``) made a key: ``unnamed_<hash>`` when blank, a trailing ``_`` on a JSONL record
    field, cut to 250 characters ending with ``_<hash>``."""
    if not text.strip():
        return f"unnamed_{stable_hash(key)}"
    if text in RESERVED_KEYS:
        text += "_"
    if len(text) > MAX_KEY_LENGTH:
        text = f"{text[: MAX_KEY_LENGTH - _SUFFIX_LENGTH]}_{stable_hash(key)}"
    return text


def _single_segment(text: str) -> str:
    """One path segment: a ``/`` inside a label value must not split the key."""
    return text.replace("/", "_")


def infra_key(
    name: str,
    stat: str | None,
    group: Mapping[str, str],
    *,
    prefix: str = "rollout",
    alias: str | None = None,
) -> str:
    """The tracker key of an infrastructure metric statistic.

    ``prefix/<name with ':' as '/'>/<stat>/<label.value>/...``: ``alias`` replaces the metric name, an empty
    ``prefix`` or a ``None`` stat adds no segment, and the group's labels come sorted by label name. For
    example ``infra_key("vllm:generation_tokens_total", "delta", {"model_name": "m"})`` is
    ``"rollout/vllm/generation_tokens_total/delta/model_name.m"``.
    """
    if alias is not None and not alias.strip():
        raise ConfigError(f"the alias of metric {name!r} is empty: remove 'alias' or give it a name")
    parts: list[str] = []
    if prefix:
        parts.append(prefix)
    parts.append((alias if alias is not None else name).replace(":", "/"))
    if stat:
        parts.append(_single_segment(stat))
    parts.extend(
        f"{_single_segment(str(label))}.{_single_segment(str(value))}" for label, value in sorted(group.items())
    )
    return sanitize_key("/".join(parts))


PHASE_PREFIX: Final = "phase"
"""First segment of every per-phase key: the phases get their own section in wandb, TensorBoard and MLflow."""


STEP_SECONDS_KEY: Final = f"{PHASE_PREFIX}/step_seconds"
"""The step's duration, beside its phases' ``phase/<phase>/seconds`` (two segments: no phase's key can be it)."""
OUTSIDE_PHASES_KEY: Final = f"{PHASE_PREFIX}/outside_seconds"
"""The seconds of the step outside every phase."""


def phase_key(phase: str, key: str) -> str:
    """The tracker key of ``key`` (an infrastructure key, or ``seconds``) measured over phase ``phase``.

    ``phase/<phase>/<key>``: ``phase_key("gen", "rollout/vllm/generation_tokens_total/rate")`` is
    ``"phase/gen/rollout/vllm/generation_tokens_total/rate"``; the phase's duration is ``phase/gen/seconds``.
    """
    return sanitize_key(f"{PHASE_PREFIX}/{_single_segment(phase)}/{key}")


def record_key(key: str) -> str:
    """``key`` as a record holds it: unchanged, except that control characters and lone surrogates become ``_``, an
    empty (or blank) key becomes ``unnamed_<hash>``, a JSONL record field (``step``, ``time``, ``window_start``,
    ``_notes``) gets a trailing ``_``, and a key longer than 250 characters is cut and ends with ``_<hash>``.
    Idempotent."""
    return _finish(_CONTROL_CHARS.sub("_", key), key)


def trainer_key(name: str) -> str:
    """The tracker key of a value the trainer logged under ``name`` (``bridge.log``): ``name`` itself
    (:func:`record_key`), so ``val-core/gsm8k/reward/mean@1`` stays ``mean@1``; a tracker that cannot take it renames
    it with its :class:`KeyRule`."""
    return record_key(name)


def instrument_key(name: str) -> str:
    """The tracker key of an OpenTelemetry instrument: its name's ``.`` become ``/``.

    TensorBoard and wandb make a section of a key's first ``/`` segment, so ``trainer.update_seconds`` would be a
    section of its own; ``instrument_key("trainer.update_seconds")`` is ``"trainer/update_seconds"``, in the
    section ``trainer`` with the other ``trainer.*`` instruments, in every tracker.
    """
    return sanitize_key(name.replace(".", "/"))


def _with_suffix(key: str, suffix: str) -> str:
    room = MAX_KEY_LENGTH - _SUFFIX_LENGTH
    return f"{key[:room]}_{suffix}"


class KeyRegistry:
    """Keeps tracker keys unique across the metrics of one run. Thread-safe.

    The first source (metric identity, e.g. its unsanitised name) to claim a key keeps it. A later,
    different source whose key is already taken gets ``<key>_<hash of the source>`` instead, and a WARNING
    is logged once for it. The same source always gets the same key back.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._assigned: dict[tuple[str, str], str] = {}
        self._owners: dict[str, str] = {}

    def key_for(self, source: str, sanitized: str) -> str:
        """The key under which ``source`` (whose sanitised key is ``sanitized``) is logged."""
        with self._lock:
            assigned = self._assigned.get((source, sanitized))
            if assigned is not None:
                return assigned
            key = sanitized
            owner = self._owners.get(key)
            if owner is not None and owner != source:
                key = self._disambiguate(source, sanitized)
                _log.warning(
                    "tracker key %r: %r and %r both map to it; %r is logged as %r. "
                    "Give one of them an alias to choose its key yourself.",
                    sanitized,
                    owner,
                    source,
                    source,
                    key,
                )
            self._owners[key] = source
            self._assigned[(source, sanitized)] = key
            return key

    def _disambiguate(self, source: str, sanitized: str) -> str:
        attempt = 0
        while True:
            salt = source if attempt == 0 else f"{source}\x00{attempt}"
            candidate = _with_suffix(sanitized, stable_hash(salt))
            owner = self._owners.get(candidate)
            if owner is None or owner == source:
                return candidate
            attempt += 1


@dataclass(frozen=True, slots=True)
class KeyRule:
    """How one tracker names a record key it cannot take as it is: ``rename`` returns the key unchanged when the
    tracker accepts it; ``reason`` says, for the record's notes, what the tracker does not accept."""

    tracker: str
    reason: str
    rename: Callable[[str], str]


def _mlflow_name(key: str) -> str:
    text = _MLFLOW_FORBIDDEN.sub("_", key.replace("@", "_at_"))
    segments = [("_" * len(part) if part.strip(".") == "" else part) for part in text.split("/") if part]
    result = "/".join(segments)
    if result.startswith(".."):  # MLflow refuses a name that normalises to a parent path
        result = "_" + result[1:]
    return _finish(result, key)


def _wandb_name(key: str) -> str:
    # define_metric refuses a `*` anywhere but at the end, escaped or not ("glob suffixes only", wandb 0.31)
    globbed = key[:-1].replace("*", "_") + key[-1:]
    return globbed.lstrip("_") or f"unnamed_{stable_hash(key)}"


MLFLOW_KEYS: Final = KeyRule(
    "mlflow",
    "MLflow metric names hold only letters, digits, '_', '-', '.', ' ', ':' and '/', and are paths; '@' becomes "
    "'_at_' as in verl's MLflow logger",
    _mlflow_name,
)
"""MLflow's rule (``mlflow/utils/validation.py``: ``_validate_metric_name``)."""

WANDB_KEYS: Final = KeyRule(
    "wandb",
    "wandb keeps keys that start with '_' for its own fields, and its define_metric takes '*' only at a key's end",
    _wandb_name,
)
"""wandb's rule: keys starting with ``_`` are its own (``_step``, ``_runtime``, ``_timestamp``); ``define_metric``
refuses a ``*`` before a name's last character, escaped or not (``wandb/sdk/wandb_run.py``: "glob suffixes only"),
so such a ``*`` becomes ``_``."""

TRACKIO_RESERVED: Final = frozenset({"project", "run", "timestamp", "step", "time", "metrics"})
"""Keys trackio renames (to ``__<key>``) because its rows use them."""


def _trackio_name(key: str) -> str:
    if key.startswith("__"):
        key = key.lstrip("_") or f"unnamed_{stable_hash(key)}"
    return f"{key}_" if key in TRACKIO_RESERVED else key


TRACKIO_KEYS: Final = KeyRule(
    "trackio",
    "trackio's rows use 'project', 'run', 'timestamp', 'step', 'time', 'metrics' and '__' keys",
    _trackio_name,
)
"""trackio's rule: its row fields, and keys starting with ``__``, which it keeps for its own."""

MAX_NOTED_RENAMES: Final = 3
"""Renamed keys a note lists by name; the others are counted."""


class TrackerKeys:
    """One tracker's names for a run's record keys, by its :class:`KeyRule`: a key the tracker takes is kept; a
    renamed key that would land on another key of the run gets ``_<hash of the key>`` (see :class:`KeyRegistry`).
    Thread-safe."""

    def __init__(self, rule: KeyRule) -> None:
        self.rule = rule
        self._registry = KeyRegistry()
        self._names: dict[str, str] = {}
        self._lock = threading.Lock()

    def name(self, key: str) -> str:
        """The key this tracker logs ``key`` under."""
        with self._lock:
            named = self._names.get(key)
        if named is None:
            named = self._registry.key_for(key, self.rule.rename(key))
            with self._lock:
                self._names[key] = named
        return named

    def rename(self, values: Mapping[str, float]) -> dict[str, float]:
        """``values`` under this tracker's names."""
        return {self.name(key): value for key, value in values.items()}

    def note(self, keys: Iterable[str]) -> str | None:
        """The record note for ``keys``: which of them this tracker receives under another name, and why; ``None``
        when it takes them all."""
        renamed = [(key, name) for key in sorted(keys) if (name := self.name(key)) != key]
        if not renamed:
            return None
        shown = ", ".join(f"{key!r} as {name!r}" for key, name in renamed[:MAX_NOTED_RENAMES])
        more = f" and {len(renamed) - MAX_NOTED_RENAMES} more" if len(renamed) > MAX_NOTED_RENAMES else ""
        return f"{self.rule.tracker} receives {len(renamed)} key(s) renamed: {shown}{more} ({self.rule.reason})"
