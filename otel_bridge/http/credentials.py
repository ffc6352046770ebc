"""TLS settings and credentials as the transport uses them: config sections to requests' ``verify``/``cert``, the
bearer-token auth, and the forms of a secret that must never be echoed."""

from __future__ import annotations

import base64
import json
import logging
from typing import Literal

import requests

from otel_bridge.config import TLSConfig
from otel_bridge.errors import ConfigError

__all__ = ["BearerAuth", "secret_forms", "tls_arguments"]

_log = logging.getLogger(__name__)


# The keys of each ``tls`` section, for messages: verify, ca_file, cert_file, key_file.
_TLS_KEYS = {
    "prometheus": (
        "prometheus.tls.verify",
        "prometheus.tls.ca_file",
        "prometheus.tls.cert_file",
        "prometheus.tls.key_file",
    ),
    "scrape": ("scrape.tls.verify", "scrape.tls.ca_file", "scrape.tls.cert_file", "scrape.tls.key_file"),
}


def tls_arguments(
    tls: TLSConfig, section: Literal["prometheus", "scrape"], where: str
) -> tuple[bool | str, tuple[str, str] | str | None]:
    """``tls`` (the ``tls`` of config ``section``) as requests' ``verify`` and ``cert``; :class:`ConfigError` for
    files that do not exist.

    Logs one WARNING when verification is off (``where`` names what is talked to).
    """
    verify_key, ca_key, cert_key, key_key = _TLS_KEYS[section]
    if tls.ca_file is not None and not tls.verify:
        raise ConfigError(
            f"{ca_key} is set but {verify_key} is false; remove one of them (ca_file only matters when certificates "
            "are verified)"
        )
    if tls.ca_file is not None and not tls.ca_file.exists():  # a file, or a directory of hashed CA certificates
        raise ConfigError(f"{ca_key} {str(tls.ca_file)!r} does not exist; give a PEM CA bundle file")
    for key, path in ((cert_key, tls.cert_file), (key_key, tls.key_file)):
        if path is not None and not path.is_file():
            raise ConfigError(f"{key} {str(path)!r} does not exist; give a PEM file")
    if not tls.verify:
        _log.warning(
            "TLS certificate verification is disabled for %s (%s is false): anyone on the network path can "
            "impersonate it; set %s instead",
            where,
            verify_key,
            ca_key,
        )
    verify: bool | str = str(tls.ca_file) if tls.ca_file is not None else tls.verify
    if tls.cert_file is None:
        return verify, None
    return verify, (str(tls.cert_file), str(tls.key_file)) if tls.key_file is not None else str(tls.cert_file)


class BearerAuth(requests.auth.AuthBase):
    """Sets ``Authorization: Bearer <token>``. Being the session's auth, it also keeps requests from applying
    ``~/.netrc`` credentials over it."""

    def __init__(self, token: str) -> None:
        self._token = token

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers["Authorization"] = f"Bearer {self._token}"
        return request

    def __repr__(self) -> str:
        return "BearerAuth(token=***)"


def secret_forms(bearer_token: str | None, basic_auth: tuple[str, str] | None) -> tuple[str, ...]:
    """The strings that must never be echoed back (token, password, encoded basic-auth header), each also as a JSON
    string would escape it (``\\/``, ``\\uXXXX``), longest first."""
    forms: list[str] = []
    if bearer_token:
        forms.append(bearer_token)
    if basic_auth:
        if basic_auth[1]:
            forms.append(basic_auth[1])
        forms.append(base64.b64encode(f"{basic_auth[0]}:{basic_auth[1]}".encode()).decode())
    escaped = [v for f in forms for v in (json.dumps(f)[1:-1], json.dumps(f, ensure_ascii=False)[1:-1])]
    variants = {*forms, *escaped, *(v.replace("/", "\\/") for v in [*forms, *escaped])}
    return tuple(sorted(variants, key=len, reverse=True))
