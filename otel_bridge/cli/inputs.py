"""The command line's own inputs checked into one-line errors, and text from servers and record files made safe to
print: a URL without a scheme gets a suggestion, a URL's password is never written or echoed, and control characters
(terminal escape sequences) are shown escaped."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit, urlunsplit

from otel_bridge.errors import ConfigError
from otel_bridge.prometheus.promql import duration

_UNPRINTABLE: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
"""Control characters (ESC starts every terminal escape sequence), bidirectional overrides and lone surrogates."""


_URL_PASSWORD: Final = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/@:\s]*):[^/@\s]*@")
"""The password of ``scheme://user:password@host`` in any text."""


def without_url_passwords(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@host`` in it replaced by ``***``."""
    return _URL_PASSWORD.sub(r"\g<head>:***@", text)


def printable(text: str) -> str:
    """``text`` safe for a terminal: every control character, bidirectional override and lone surrogate is shown
    as its escape (``\\x1b``, ``\\u202e``), so text from a server or a record file cannot drive the terminal."""
    return _UNPRINTABLE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


@dataclass(frozen=True, slots=True)
class CheckedUrl:
    """A URL given on the command line: ``url`` without any user info, the ``username`` it named, and whether it
    carried a password (never kept)."""

    url: str
    username: str | None
    had_password: bool


def check_url(text: str, option: str) -> CheckedUrl:
    """``text`` as an http(s) URL; a :class:`ConfigError` naming ``option`` (with the likely URL when the scheme is
    missing) otherwise. The password of ``http://user:password@host`` is dropped, never echoed."""
    value = text.strip()
    if "://" not in value:
        guess = printable(value.split("@")[-1])
        raise ConfigError(f"{option} needs a URL with a scheme; did you mean http://{guess} ?")
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        raise ConfigError(f"{option} is not a valid URL (check its host and port)") from None
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not host:
        raise ConfigError(f"{option} must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:9090")
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return CheckedUrl(url=url, username=parts.username or None, had_password=parts.password is not None)


def check_interval(seconds: float, option: str) -> float:
    """``seconds`` when Prometheus takes it as an interval (from 1 ms to about 292 years, finite); a one-line
    :class:`ConfigError` naming ``option`` otherwise (``inf`` or ``1e300`` would end in an ``OverflowError`` or a
    file promtool refuses)."""
    try:
        if not seconds > 0:
            raise ConfigError("an interval must be a positive number of seconds")
        duration(seconds)
    except ConfigError as exc:
        raise ConfigError(f"{option} {seconds:g}: {exc}") from None
    return seconds
