"""Credentials and TLS settings of the HTTP endpoints the bridge reads.

Secrets (bearer tokens, basic-auth passwords) come from an environment variable or a file, read when a client is
built, never inline in the configuration, and never appear in logs, errors or reprs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from otel_bridge.errors import ConfigError


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class AuthConfig(_Model):
    """Credentials for Prometheus (``prometheus.auth``) or the scrape targets (``scrape.auth``). Secrets are read from
    an environment variable or a file, never inline."""

    bearer_token_env: str | None = Field(None, description="Environment variable holding a bearer token.")
    bearer_token_file: Path | None = Field(None, description="File holding a bearer token.")
    username: str | None = Field(None, description="Basic-auth user name (the password comes from env or file).")
    password_env: str | None = Field(None, description="Environment variable holding the basic-auth password.")
    password_file: Path | None = Field(None, description="File holding the basic-auth password.")

    @model_validator(mode="after")
    def _one_scheme(self) -> Self:
        bearer = self.bearer_token_env is not None or self.bearer_token_file is not None
        basic = self.username is not None or self.password_env is not None or self.password_file is not None
        if bearer and basic:
            raise ValueError("use either a bearer token or basic auth (username + password), not both")
        if self.bearer_token_env is not None and self.bearer_token_file is not None:
            raise ValueError("set only one of bearer_token_env and bearer_token_file")
        if self.password_env is not None and self.password_file is not None:
            raise ValueError("set only one of password_env and password_file")
        if basic and (self.username is None or (self.password_env is None and self.password_file is None)):
            raise ValueError("basic auth needs username and one of password_env / password_file")
        return self

    def bearer_token(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The bearer token, read now from its environment variable or file."""
        return _read_secret("bearer token", self.bearer_token_env, self.bearer_token_file, environ)

    def basic_auth(self, environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
        """``(username, password)``, the password read now from its environment variable or file."""
        if self.username is None:
            return None
        password = _read_secret("password", self.password_env, self.password_file, environ)
        assert password is not None  # the validator guarantees a source
        return self.username, password


def _read_secret(what: str, env: str | None, file: Path | None, environ: Mapping[str, str] | None) -> str | None:
    environ = os.environ if environ is None else environ
    if env is not None:
        value = environ.get(env)
        if not value:
            raise ConfigError(f"the {what} comes from environment variable {env}, which is not set or empty: set it")
        return value.strip()
    if file is not None:
        try:
            value = file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"cannot read the {what} file {file}: {exc.strerror}; fix the path") from None
        except UnicodeDecodeError:
            raise ConfigError(f"the {what} file {file} is not UTF-8 text; fix its content") from None
        if not value:
            raise ConfigError(f"the {what} file {file} is empty: put the {what} in it")
        return value
    return None


def refuse_url_credentials(values: list[str]) -> None:
    """A scrape target written with ``user:password@`` is refused without echoing it (the password is in it)."""
    for index, value in enumerate(values):
        authority = value.split("://", 1)[-1].split("/", 1)[0]
        if "@" in authority:
            raise ValueError(
                f"scrape.targets[{index}] contains credentials (user:password@...), which would end up in logs and "
                "tracker keys; remove them from the URL and set scrape.auth.username with scrape.auth.password_env "
                "or scrape.auth.password_file (or scrape.auth.bearer_token_env / scrape.auth.bearer_token_file)"
            )


class TLSConfig(_Model):
    """TLS for HTTPS endpoints: verification is on unless switched off explicitly."""

    verify: bool = True
    ca_file: Path | None = Field(None, description="CA bundle to verify the server with (instead of the system one).")
    cert_file: Path | None = Field(None, description="Client certificate (PEM).")
    key_file: Path | None = Field(None, description="Client certificate key (PEM).")

    @model_validator(mode="after")
    def _cert_pair(self) -> Self:
        if self.key_file is not None and self.cert_file is None:
            raise ValueError("key_file needs cert_file")
        return self
