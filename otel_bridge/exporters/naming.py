"""Tracker key naming: every rule that turns a metric into a tracker key lives here.

A tracker key is a ``/``-separated path such as ``rollout/vllm/generation_tokens_total/delta`` or
``actor/loss``. :func:`sanitize_key` makes any text a key that every backend we ship or plan to ship accepts
unchanged:

- TensorBoard accepts any tag;
- MLflow accepts ``^[/\\w.\\- ]*$``, at most 250 characters, and names that ``posixpath.normpath`` leaves
  alone (no ``//``, no leading or trailing ``/``, no ``.`` or ``..`` segment, no leading ``..``);
- wandb reserves keys starting with ``_`` for its own fields (``_step``, ``_runtime``, ``_timestamp``);
- the JSONL backend uses ``step``, ``time`` and ``window_start`` as record fields.

The rules, applied in this order:

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
import threading
from collections.abc import Mapping
from typing import Final

from otel_bridge.errors import ConfigError

_log = logging.getLogger(__name__)

MAX_KEY_LENGTH: Final = 250
"""The longest key any backend accepts (MLflow's limit)."""

RESERVED_KEYS: Final = frozenset({"step", "time", "window_start"})
"""Keys the JSONL backend uses for the record's own fields."""

_HASH_DIGITS: Final = 8
_SUFFIX_LENGTH: Final = 1 + _HASH_DIGITS
_FORBIDDEN_CHARS: Final = re.compile(r"[^A-Za-z0-9_\-./ ]")


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
    result = "/".join(segments)
    if not result:
        return f"unnamed_{stable_hash(key)}"
    if result in RESERVED_KEYS:
        result += "_"
    if len(result) > MAX_KEY_LENGTH:
        result = f"{result[: MAX_KEY_LENGTH - _SUFFIX_LENGTH]}_{stable_hash(key)}"
    return result


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


def trainer_key(name: str) -> str:
    """The tracker key of a value the trainer logged under ``name`` (``bridge.log``).

    verl-style keys (``actor/loss``, ``perf/throughput``) are valid keys and come back unchanged; anything else is
    sanitised with :func:`sanitize_key`.
    """
    return sanitize_key(name)


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
