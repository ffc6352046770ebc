"""The configuration model: every section of ``otel-bridge.yaml``, validated by pydantic on one base model.

Unknown keys and wrong types raise :class:`~otel_bridge.errors.ConfigError` naming the key and what is allowed
(:mod:`otel_bridge.config.messages`); where the values come from (a YAML file, a dict, ``OTEL_BRIDGE__...``
environment overrides, secrets in environment variables or files) is :mod:`otel_bridge.config.load`.

Secrets (bearer tokens, basic-auth passwords) are never inline: :class:`AuthConfig` names the environment variable or
file that holds them and reads it when a client is built, and they never appear in logs, errors or reprs.

A ``metrics[].otlp`` entry (:class:`OTLPInstrumentConfig`) names a trainer metric by its OpenTelemetry instrument
instead of its Prometheus name. The trainer's instruments reach Prometheus through the collector renamed
(``trainer.tokens`` counting ``{token}`` becomes ``trainer_tokens_total``); the entry names them as the trainer wrote
them, and the bridge queries the name the collector gives them (:mod:`otel_bridge.prometheus_names`), summed over
every rank that pushes them. The entry mirrors the exporter's naming settings, or Prometheus 3's ``otlp:
translation_strategy`` when the trainer pushes to its OTLP receiver; the two UTF-8 strategies keep dots, which the
PromQL path checks against the store at start-up (:func:`otel_bridge.producers.promql.check_names`).

otelcol-contrib v0.136.0's ``prometheusremotewrite`` exporter has ``add_metric_suffixes`` only (``translation_strategy``
came to it in 2026, contrib PR #47714); its ``prometheus`` exporter also has ``translation_strategy`` (since v0.132.0:
the ``exporter.prometheusexporter.DisableAddMetricSuffixes`` gate registered with it,
``internal/metadata/generated_feature_gates.go`` at commit 40c9eb77, is alpha, i.e. off, in v0.136), and an explicit
strategy wins over ``add_metric_suffixes`` (``getTranslationConfiguration`` in its ``collector.go``, read at commit
0000b194: strategy if set, else suffixes if that gate is on, else ``add_metric_suffixes``; UTF-8 only for the two
``NoUTF8``/``NoTranslation`` strategies).

This is the bottom of the house: it imports nothing of otel_bridge above itself (errors, the statistic names of
:mod:`otel_bridge.window` and the name grammar of :mod:`otel_bridge.prometheus_names`).
"""

from __future__ import annotations

import copy
import difflib
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final, Literal, Self, get_args
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from otel_bridge.config.load import AUTO, Lines, apply_env_overrides, read_secret, read_yaml_lines
from otel_bridge.config.messages import HIDDEN, format_validation_error, names_a_secret
from otel_bridge.config.trackers import BUILTIN_TRACKERS, plugin_tracker_types, unknown_tracker_message
from otel_bridge.errors import ConfigError, redact_url_credentials
from otel_bridge.prometheus_names import (
    LABEL_NAME,
    METRIC_NAME,
    STRATEGIES,
    Instrument,
    TranslationStrategy,
    metric_kind,
    prometheus_name,
)
from otel_bridge.window import DEFAULT_STATS, IDLE_STAT, MetricKind, allowed_stats, is_valid_stat

BoundaryMode = Literal["auto", "scrape", "samples"]
"""``prometheus.boundary``: what bounds a step's window for counters and histograms."""
RulesMode = Literal["auto", "required", "off"]
"""``prometheus.recording_rules``: whether a step reads otel-bridge's recording rules."""
ScrapeReaders = Literal["auto", "trainer", "node_agents"]
"""``scrape.readers``: who reads the scrape targets (and the PromQL path's boundary readings), the trainer's node or
one agent per Ray node."""
Readers = Literal["trainer", "node_agents"]
"""Who reads, once ``scrape.readers: auto`` is resolved."""
DEFAULT_MAX_GROUPS = 100
"""``max_groups``' default: the label groups one metric adds to a record at most."""


def _check_http_url(value: str, key: str, credentials_go: str, written: str | None = None) -> str:
    """``value`` if it is an http(s) URL with a valid port and no credentials (``credentials_go`` says where they
    belong instead). Messages never quote the URL's user information (:func:`redact_url_credentials`)."""
    shown = repr(redact_url_credentials(value if written is None else written))
    if not re.match(r"^https?://[^/\s]+", value):
        raise ValueError(f"{key} must be an http:// or https:// URL, got {shown}")
    parts = urlsplit(value)
    if "@" in parts.netloc or "@" in value.split("://", 1)[1].split("?", 1)[0].split("#", 1)[0]:
        raise ValueError(
            f"{key} contains credentials (a user name or password before the host's @), which would end up in logs "
            f"and errors; remove them from the URL and {credentials_go}"
        )
    try:
        port = parts.port
    except ValueError:
        port = -1
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"{key} = {shown}: the port must be a number from 1 to 65535")
    return value.rstrip("/")


def _takes_a_number(annotation: Any) -> bool:
    """Whether a field of type ``annotation`` holds an int or float (and not a bool)."""
    args = get_args(annotation) or (annotation,)
    return bool({int, float} & set(args)) and bool not in args


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_are_not_booleans(cls, value: Any, info: ValidationInfo) -> Any:
        """A number field refuses ``true``/``false``, which pydantic would read as 1 and 0 (``full_scale: true``
        would make a device's full scale 1)."""
        if isinstance(value, bool) and info.field_name is not None:
            field = cls.model_fields.get(info.field_name)
            if field is not None and _takes_a_number(field.annotation):
                raise ValueError(f"a number is needed, not the boolean {str(value).lower()}")
        return value

    def __repr__(self) -> str:
        return redact_url_credentials(super().__repr__())

    def __str__(self) -> str:
        return redact_url_credentials(super().__str__())


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
        return read_secret("bearer token", self.bearer_token_env, self.bearer_token_file, environ)

    def basic_auth(self, environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
        """``(username, password)``, the password read now from its environment variable or file."""
        if self.username is None:
            return None
        password = read_secret("password", self.password_env, self.password_file, environ)
        assert password is not None  # the validator guarantees a source
        return self.username, password


_SCRAPE_CREDENTIALS = (
    "set scrape.auth.username with scrape.auth.password_env or scrape.auth.password_file (or "
    "scrape.auth.bearer_token_env / scrape.auth.bearer_token_file)"
)


def refuse_url_credentials(values: list[str]) -> None:
    """A scrape target written with ``user:password@`` is refused without echoing it (the password is in it)."""
    for index, value in enumerate(values):
        authority = value.split("://", 1)[-1].split("/", 1)[0]
        if "@" in authority:
            raise ValueError(
                f"scrape.targets[{index}] contains credentials (a user name or password before the host's @), which "
                f"would end up in logs and tracker keys; remove them from the URL and {_SCRAPE_CREDENTIALS}"
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


class OTLPInstrumentConfig(_Model):
    """``metrics[].otlp``: the instrument as the trainer created it, e.g. ``{name: trainer.tokens, unit: "{token}",
    instrument: counter}``."""

    name: str = Field(description="The instrument's name, e.g. trainer.tokens.")
    unit: str = Field("", description="The instrument's unit (UCUM): s, By, 1, {token}, By/s, ...; default none.")
    instrument: Instrument = Field(
        description=(
            "counter | up_down_counter | gauge | histogram (ObservableCounter is a counter, ObservableUpDownCounter "
            "an up_down_counter, ObservableGauge a gauge)."
        )
    )
    namespace: str = Field(
        "", description="The collector exporter's `namespace`, if it sets one (the shipped config does not)."
    )
    add_metric_suffixes: bool = Field(
        True, description="The collector exporter's `add_metric_suffixes` (true by default: unit, _total and _ratio)."
    )
    translation_strategy: TranslationStrategy | None = Field(
        None,
        description=(
            "The translation_strategy of what named the series, if it sets one (it then wins over "
            "add_metric_suffixes): Prometheus 3's `otlp: translation_strategy` when the trainer pushes to its OTLP "
            "receiver, or the collector exporter's. UnderscoreEscapingWithSuffixes, "
            "UnderscoreEscapingWithoutSuffixes, NoUTF8EscapingWithSuffixes or NoTranslation (the last two keep dots: "
            "UTF-8 names, which need Prometheus 3)."
        ),
    )

    @model_validator(mode="after")
    def _translatable(self) -> Self:
        translated = self.prometheus_name
        if self.escaped and not METRIC_NAME.fullmatch(translated):
            raise ValueError(
                f"namespace {self.namespace!r} makes {translated!r}, not a valid Prometheus metric name: use letters, "
                "digits and '_'"
            )
        return self

    @property
    def suffixes(self) -> bool:
        """Whether unit and type suffixes are added: the strategy's choice if one is set."""
        if self.translation_strategy is not None:
            return STRATEGIES[self.translation_strategy][0]
        return self.add_metric_suffixes

    @property
    def escaped(self) -> bool:
        """Whether the name is escaped to a classic Prometheus name (false for the two UTF-8 strategies)."""
        return self.translation_strategy is None or STRATEGIES[self.translation_strategy][1]

    @property
    def prometheus_name(self) -> str:
        """The metric name in Prometheus (a histogram's series add ``_bucket``, ``_sum``, ``_count``)."""
        return prometheus_name(self.name, self.unit, self.instrument, self.namespace, self.suffixes, self.escaped)


class PrometheusConfig(_Model):
    """Where Prometheus is and how to talk to it (the PromQL path)."""

    url: str | None = Field(
        None, description="Prometheus base URL (http://127.0.0.1:9090), or 'auto': env, then the Ray head node."
    )
    ray_port: int = Field(9090, ge=1, le=65535, description="Prometheus' port on the Ray head (url: auto).")
    timeout_s: float = Field(10.0, gt=0, description="Per-request timeout.")
    retries: int = Field(3, ge=0, le=20, description="Retries for transient failures (connection, timeout, 503).")
    backoff_s: float = Field(0.5, ge=0, description="Exponential backoff base between retries.")
    max_response_bytes: int = Field(50_000_000, gt=0, description="Cap on one response body.")
    max_series: int = Field(100_000, gt=0, description="Cap on the number of series in one query result.")
    max_samples: int = Field(
        1_000_000,
        gt=0,
        description=(
            "Cap on the samples in one query result (every [time, value] pair of a matrix), checked before the "
            "answer is decoded: 6 million samples fit in 50 MB and take 1.5 GB once decoded."
        ),
    )
    post_threshold_bytes: int = Field(2048, gt=0, description="Queries longer than this are sent as POST forms.")
    scrape_interval_s: float = Field(
        15.0,
        gt=0,
        description=(
            "Prometheus' scrape interval, used until Prometheus' own targets list says otherwise: the bridge looks 2x "
            "this far back for a window's baseline."
        ),
    )
    boundary: BoundaryMode = Field(
        "auto",
        description=(
            "What bounds a step's window for counters and histograms. 'scrape': the bridge scrapes the targets "
            "Prometheus lists at each step boundary itself (exact); 'samples': Prometheus' last sample at or before "
            "each boundary (off by up to one scrape interval, reported as otel_bridge/boundary_lag_s); 'auto': "
            "scrape when the targets Prometheus lists all answer and, read by the trainer (scrape.readers), are at "
            "most boundary_max_targets, else samples."
        ),
    )
    boundary_max_targets: int = Field(
        64,
        ge=0,
        description=(
            "With boundary: auto, the most targets the trainer scrapes itself at each boundary (node agents have no "
            "such limit: scrape.readers)."
        ),
    )
    recording_rules: RulesMode = Field(
        "auto",
        description=(
            "With boundary samples: read counters and histograms through otel-bridge's recording rules (written by "
            "`otel-bridge prometheus-rules`) so a step's reading does not grow with replicas. 'auto': when "
            "Prometheus runs them unchanged; 'required': a start-up error otherwise; 'off': always the raw series."
        ),
    )
    max_clock_offset_s: float = Field(
        1.0,
        gt=0,
        allow_inf_nan=False,
        description=(
            "How far Prometheus' clock may be from the trainer's before a WARNING says so. The bridge measures the "
            "offset at start-up and every minute and asks each window at Prometheus' times either way; "
            "otel_bridge/clock_offset_s reports it in every record."
        ),
    )
    auth: AuthConfig = AuthConfig()
    tls: TLSConfig = TLSConfig()
    isolation: Literal["process", "thread"] = Field(
        "process",
        description=(
            "process: query, decode and reduce the store's answers in a child process, off the trainer's interpreter "
            "lock (same records); thread: in-process."
        ),
    )

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is None or value == AUTO:
            return value
        return _check_http_url(
            value,
            "prometheus.url",
            "set prometheus.auth.username with prometheus.auth.password_env or prometheus.auth.password_file (or "
            "prometheus.auth.bearer_token_env / prometheus.auth.bearer_token_file)",
        )


class ScrapeConfig(_Model):
    """Reading ``/metrics`` endpoints directly (the embedded default: no Prometheus server needed)."""

    targets: list[str] | Literal["auto"] = Field(
        default_factory=list,
        description="URLs or host:port (http://host:port/metrics); 'auto': Ray's service-discovery file and nodes.",
    )
    ray_service_discovery_file: Path | None = Field(
        None, description="Ray's prom_metrics_service_discovery.json (targets: auto); default: the Ray session's."
    )
    ray_temp_dir: Path | None = Field(None, description="Ray's --temp-dir, to find its service-discovery file.")
    refresh_interval_s: float = Field(30.0, gt=0, description="How often discovered targets are re-resolved.")
    timeout_s: float = Field(5.0, gt=0)
    sample_interval_s: float = Field(
        1.0,
        ge=0,
        description="In-step sampling interval for gauge min/max/mean and reset detection; 0 disables.",
    )
    max_response_bytes: int = Field(20_000_000, gt=0)
    max_series: int = Field(
        20_000,
        gt=0,
        description="Cap on the configured metrics' series one target may expose per scrape; more: scrape dropped.",
    )
    auth: AuthConfig = Field(
        AuthConfig(),
        description=(
            "Credentials sent to every scrape target (bearer_token_env/_file or username + password_env/_file); "
            "never in the target URL."
        ),
    )
    tls: TLSConfig = TLSConfig()
    isolation: Literal["process", "thread"] = Field(
        "process",
        description="process: scrape and parse in a child process, off the trainer's interpreter lock (same records).",
    )
    readers: ScrapeReaders = Field(
        "auto",
        description=(
            "Who reads the targets, and the PromQL path's boundary readings of Prometheus' targets: 'trainer' (the "
            "trainer's node, per isolation), 'node_agents' (one Ray actor per node reads its own targets; the "
            "trainer merges their partial statistics: the same numbers), 'auto': node_agents with targets: auto or "
            "on the PromQL path, on a Ray cluster of several alive nodes, else trainer."
        ),
    )

    @field_validator("targets")
    @classmethod
    def _targets(cls, values: list[str] | str) -> list[str] | str:
        if isinstance(values, str):
            return values
        refuse_url_credentials(values)
        out = []
        for index, written in enumerate(values):
            value = written
            if "://" not in value:
                if not re.match(r"^[A-Za-z0-9.\-\[\]:]+:\d+$", value):
                    raise ValueError(f"scrape.targets[{index}] = {value!r} must be a URL or host:port")
                value = f"http://{value}/metrics"
            out.append(_check_http_url(value, f"scrape.targets[{index}]", _SCRAPE_CREDENTIALS, written))
        return out


class RatioConfig(_Model):
    """A derived ratio of two counters' window deltas, e.g. prefix-cache hit rate = delta(hits) / delta(queries)."""

    numerator: str
    denominator: str

    @field_validator("numerator", "denominator")
    @classmethod
    def _names(cls, value: str) -> str:
        if not METRIC_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not a valid Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)")
        return value


PRESET_NAMES: Final = ("vllm", "sglang", "ray", "dcgm", "amd", "node")
"""The named metric sets (``- preset: vllm``), in the order documents list them: the one list of their names, checked
when a config is validated (so a misspelt preset is reported with the file's other problems); their metrics are in
:mod:`otel_bridge.producers.presets`."""


class MetricConfig(_Model):
    """One configured metric: exactly one of ``name``, ``promql``, ``preset``, ``ratio`` or ``otlp``."""

    name: str | None = Field(None, description="Prometheus metric name, e.g. vllm:generation_tokens_total.")
    promql: str | None = Field(None, description="A full PromQL expression (PromQL path only); needs alias.")
    preset: str | None = Field(None, description=f"A named metric set: {', '.join(PRESET_NAMES)}.")
    ratio: RatioConfig | None = Field(None, description="Ratio of two counters' deltas; needs alias.")
    otlp: OTLPInstrumentConfig | None = Field(
        None, description="An OpenTelemetry instrument pushed through the collector, read by its Prometheus name."
    )
    type: MetricKind | None = Field(None, description="counter, gauge or histogram (presets know theirs).")
    stats: list[str] | None = Field(None, description="Window statistics; defaults by type.")
    by: list[str] = Field(default_factory=list, description="Labels kept apart (one key per label value).")
    agg: Literal["sum", "mean", "max", "min"] = Field("sum", description="How gauges combine across series.")
    labels: dict[str, str] = Field(
        default_factory=dict, description="Label equality matchers (on a preset: added to each of its metrics)."
    )
    alias: str | None = Field(None, description="Key name used instead of the metric name.")
    scale: float | None = Field(
        None,
        gt=0,
        description=(
            "Multiplies every statistic of this metric (a unit conversion: 0.001 turns DCGM's millijoules into joules)."
        ),
    )
    full_scale: float | None = Field(
        None,
        gt=0,
        description=(
            "The gauge's value when the device is fully busy (100 for a percentage, 1 for a ratio); needed by the "
            "idle_seconds statistic. The gauge's values lie in [0, full_scale]: a series outside it in a step is "
            "left out of that step's statistics (counted in otel_bridge/impossible_values)."
        ),
    )
    busy_at: float | None = Field(
        None,
        gt=0,
        description=(
            "For the idle_seconds statistic of a gauge that counts work (vllm:num_requests_running): the value at and "
            "above which the server is fully busy (1: busy while it runs a request). Values are held to "
            "[0, busy_at], never left out; use full_scale instead for a utilization with a fixed scale."
        ),
    )
    max_groups: int | None = Field(
        None,
        ge=2,
        description=(
            "Cap on this metric's label groups (values of `by`) in one record; default: the top-level max_groups."
        ),
    )

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, value: str | None) -> str | None:
        if value is not None and value not in PRESET_NAMES:
            close = difflib.get_close_matches(value, PRESET_NAMES, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"unknown preset {value!r}; available: {', '.join(PRESET_NAMES)}{hint}")
        return value

    @model_validator(mode="after")
    def _shape(self) -> Self:
        chosen = [k for k in ("name", "promql", "preset", "ratio", "otlp") if getattr(self, k) is not None]
        if len(chosen) != 1:
            raise ValueError(f"set exactly one of name, promql, preset, ratio, otlp (got {chosen or 'none'})")
        if self.otlp is not None and self.type is not None:
            raise ValueError("an otlp entry takes its type from otlp.instrument: remove type")
        if self.name is not None and not METRIC_NAME.fullmatch(self.name):
            raise ValueError(f"name {self.name!r} is not a valid Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)")
        for label in [*self.by, *self.labels]:
            if not LABEL_NAME.fullmatch(label) or label.startswith("__"):
                raise ValueError(f"{label!r} is not a usable label name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)")
        if (self.promql is not None or self.ratio is not None) and not self.alias:
            raise ValueError("promql and ratio metrics need an alias (the key they are logged under)")
        if self.preset is not None and (
            self.type or self.stats or self.alias or self.scale or self.full_scale or self.busy_at
        ):
            raise ValueError("a preset entry takes only `preset` (and optionally `by`/`agg`/`labels`/`max_groups`)")
        known = self.type or (metric_kind(self.otlp.instrument) if self.otlp is not None else None)
        if known is not None and self.stats is not None:
            kind: MetricKind = known
            bad = [s for s in self.stats if not is_valid_stat(kind, s)]
            if bad:
                raise ValueError(f"stats {bad} are not valid for a {kind}; allowed: {allowed_stats(kind)}")
        if self.stats is not None and not self.stats:
            raise ValueError("stats must not be empty (omit it for the type's defaults)")
        if self.full_scale is not None and self.busy_at is not None:
            raise ValueError(
                "set one of full_scale (a utilization's fixed scale: values outside it are impossible) and busy_at "
                "(a count's value from which the server is fully busy: values above it are held to it)"
            )
        if self.stats is not None and IDLE_STAT in self.stats and self.full_scale is None and self.busy_at is None:
            raise ValueError(
                f"stat {IDLE_STAT} needs full_scale: the gauge's value when the device is fully busy "
                "(100 for a percentage such as DCGM_FI_DEV_GPU_UTIL, 1 for a ratio such as DCGM_FI_PROF_SM_ACTIVE), "
                "or busy_at for a count (1 for vllm:num_requests_running)"
            )
        return self

    def default_stats(self) -> tuple[str, ...]:
        """The configured statistics, or the defaults for the metric type."""
        if self.stats is not None:
            return tuple(self.stats)
        return DEFAULT_STATS[self.type] if self.type is not None else ()


class TrackerConfig(BaseModel):
    """One tracker backend: ``type`` plus that backend's own options (validated by the backend)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    type: str = Field(
        description="jsonl, tensorboard, console, wandb, mlflow, trackio, or a tracker an installed package declares"
    )

    @field_validator("type")
    @classmethod
    def _known_type(cls, kind: str) -> str:
        if kind in BUILTIN_TRACKERS:
            return kind
        plugins = plugin_tracker_types()
        if kind not in plugins:
            raise ValueError(unknown_tracker_message(kind, plugins))
        return kind

    def __repr__(self) -> str:
        return redact_url_credentials(super().__repr__())

    def __str__(self) -> str:
        return redact_url_credentials(super().__str__())

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        """The fields ``repr()`` shows: an option whose key names credentials (``api_key``, ``token``, ...; a backend
        refuses it or reads it) is shown as :data:`HIDDEN`, never its value."""
        for name, value in super().__repr_args__():
            yield name, HIDDEN if name is not None and names_a_secret(name) else value

    def options(self) -> dict[str, Any]:
        """The backend-specific options (everything but ``type``)."""
        return dict(self.model_extra or {})


class NamingConfig(_Model):
    """How tracker keys are formed."""

    infra_prefix: str = Field("rollout", description="Prefix of infrastructure keys ('' for none).")
    phase_repeats: Literal["sum", "each"] = Field(
        "sum",
        description=(
            "A phase name repeated within one step (verl's asynchronous trainers time one `gen` per local update): "
            "sum: one phase/<name>/... key per name, its seconds and statistics over all its occurrences; each: one "
            "key per occurrence (<name>, <name>_2, <name>_3...)."
        ),
    )


class RunConfig(_Model):
    """Where this run's files go (``<dir>/<name>/``), and how the run ends."""

    name: str | None = Field(None, description="Run name; default: otel-bridge-<UTC timestamp>.")
    dir: Path = Field(Path("runs"), description="Parent directory of run folders.")
    handle_sigterm: bool = Field(
        False,
        description=(
            "Make SIGTERM raise SystemExit(143) (main thread, default action only) so pending records are delivered "
            "before exit. Off by default: a library does not take over the process' signals; install() turns it on."
        ),
    )
    resume: bool = Field(
        False,
        description=(
            "Continue the run <dir>/<name> (a trainer resumed after preemption): its files are appended to instead "
            "of a new <name>-N being made. Needs run.name."
        ),
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^[A-Za-z0-9._\-]+$", value):
            raise ValueError(f"run name {value!r} may only use letters, digits, '.', '_' and '-'")
        return value

    @model_validator(mode="after")
    def _resume_names_its_run(self) -> RunConfig:
        if self.resume and self.name is None:
            raise ValueError("run.resume continues a run by its name: set run.name to the run to continue")
        return self


class DeliveryConfig(_Model):
    """The worker that assembles and delivers step records off the training thread."""

    rank: int = Field(
        0, ge=0, description="Only the process of this rank (otel.rank, else $RANK, else 0) writes to the trackers."
    )
    queue_size: int = Field(100, gt=0, description="Steps waiting for assembly before step()/log() blocks.")
    max_block_s: float = Field(
        0.5,
        ge=0,
        description="Longest a full queue blocks step()/log() before old infrastructure readings are dropped.",
    )
    backend_retries: int = Field(3, ge=0, le=100, description="Retries of a failed write, per backend and record.")
    backend_backoff_s: float = Field(0.5, ge=0, description="Exponential backoff base between write retries.")
    backend_queue_size: int = Field(
        10_000, gt=0, description="Records waiting per backend before the oldest is dropped."
    )
    produce_timeout_s: float = Field(30.0, gt=0, description="Longest wait for one step's infrastructure readings.")
    close_timeout_s: float = Field(60.0, gt=0, description="Longest wait in close() for pending records.")
    warn_interval_s: float = Field(60.0, ge=0, description="Repeated warnings are logged at most this often.")


class PrometheusEndpointConfig(_Model):
    """Expose the trainer's OTel instruments on a Prometheus ``/metrics`` endpoint."""

    enabled: bool = False
    host: str = Field("127.0.0.1", description="Bind address; 0.0.0.0 exposes it beyond this machine.")
    port: int = Field(9464, ge=0, le=65535, description="0 picks a free port (see Bridge.metrics_url).")


class OTLPConfig(_Model):
    """Push the trainer's OTel instruments to an OpenTelemetry Collector over OTLP/HTTP."""

    enabled: bool = False
    endpoint: str | None = Field(
        None, description="e.g. http://otel-collector:4318/v1/metrics; default from OTEL_EXPORTER_OTLP_*_ENDPOINT."
    )
    interval_s: float = Field(10.0, gt=0, description="Push interval.")
    timeout_s: float = Field(10.0, gt=0)
    traces: bool = Field(
        True,
        description=(
            "Also push one trace per step (to the endpoint's /v1/traces). false for an endpoint that takes metrics "
            "only: Prometheus 3's OTLP receiver (/api/v1/otlp/v1/metrics) answers traces with 404."
        ),
    )

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        return (
            None
            if value is None
            else _check_http_url(
                value,
                "otel.otlp.endpoint",
                "give the OTLP exporter its Authorization header in the environment variable "
                "OTEL_EXPORTER_OTLP_METRICS_HEADERS or OTEL_EXPORTER_OTLP_HEADERS (authorization=Basic%20...)",
            )
        )

    @model_validator(mode="after")
    def _traces_to_prometheus(self) -> Self:
        if self.enabled and self.traces and self.endpoint and urlsplit(self.endpoint).path.startswith("/api/v1/otlp"):
            raise ValueError(
                f"otel.otlp.endpoint {self.endpoint} is Prometheus' OTLP receiver, which takes metrics only: set "
                "otel.otlp.traces: false (or push to a collector, which takes both)"
            )
        return self


class OTelConfig(_Model):
    """The bridge's MeterProvider: resource attributes and extra exports of the trainer's instruments."""

    service_name: str | None = Field(
        None, description="service.name; default $OTEL_SERVICE_NAME or otel-bridge-trainer."
    )
    run_id: str | None = Field(None, description="Resource attribute otel_bridge.run; default the run name.")
    rank: int | None = Field(None, ge=0, description="Resource attribute otel_bridge.rank; default $RANK.")
    resource_attributes: dict[str, str] = Field(default_factory=dict)
    collect_every: int = Field(1, ge=1, description="Collect the instruments at every N-th step only (README).")
    prometheus: PrometheusEndpointConfig = PrometheusEndpointConfig()
    otlp: OTLPConfig = OTLPConfig()


class BridgeConfig(_Model):
    """The whole otel-bridge configuration."""

    startup: Literal["strict", "degrade"] = Field(
        "strict",
        description="strict: raise at start-up when Prometheus/endpoints are unreachable; degrade: warn, run without "
        "infrastructure metrics and pick them up when they come back.",
    )
    source: Literal["auto", "promql", "scrape"] = Field(
        "auto",
        description="auto: promql when prometheus.url is set, else scrape when scrape.targets are set.",
    )
    prometheus: PrometheusConfig = PrometheusConfig()
    scrape: ScrapeConfig = ScrapeConfig()
    metrics: list[MetricConfig] = Field(default_factory=list)
    max_groups: int = Field(
        DEFAULT_MAX_GROUPS,
        ge=2,
        description=(
            "Cap on the label groups (values of a metric's `by` labels) one metric adds to a record; the groups after "
            "the first max_groups - 1 in label order are summed into one `_other` group (delta, rate, count, sum, and "
            "gauges with agg sum/max/min) or left out (quantiles, means, ratios), counted in "
            "otel_bridge/groups_dropped. metrics[].max_groups overrides it for one metric."
        ),
    )
    roles: dict[str, list[dict[str, str]]] = Field(
        default_factory=dict,
        description=(
            "What each series serves, named once: role -> label sets (e.g. rollout: [{Hostname: node-0}, "
            "{Hostname: node-1, gpu: '0'}]). A series whose labels include all of one of a role's label sets "
            "belongs to that role; metrics with `by: [role]` are grouped by it (series in no role left out, a series "
            "in several roles counted in each)."
        ),
    )
    trackers: list[TrackerConfig] = Field(default_factory=lambda: [TrackerConfig(type="jsonl")])
    naming: NamingConfig = NamingConfig()
    run: RunConfig = RunConfig()
    delivery: DeliveryConfig = DeliveryConfig()
    otel: OTelConfig = OTelConfig()

    @model_validator(mode="after")
    def _source(self) -> Self:
        source = self.resolved_source()
        if source == "promql" and self.prometheus.url is None:
            raise ValueError("source is promql but prometheus.url is not set")
        if source == "scrape":
            raw = [m.alias for m in self.metrics if m.promql is not None]
            if raw:
                raise ValueError(f"promql metrics {raw} need the PromQL path: set prometheus.url (source: promql)")
            otlp = [(i, m.otlp) for i, m in enumerate(self.metrics) if m.otlp is not None]
            if otlp:
                raise ValueError(
                    f"metrics[{otlp[0][0]}].otlp names a trainer metric that the collector writes into Prometheus, so "
                    "it needs the PromQL path: set prometheus.url (source: promql); to scrape an endpoint that serves "
                    f"it (the collector's prometheus exporter) write `name: {otlp[0][1].prometheus_name}` instead"
                )
            if self.metrics and not self.scrape.targets:
                raise ValueError(
                    "metrics are configured but there is nowhere to read them: set prometheus.url or scrape.targets"
                )
        return self

    @field_validator("roles")
    @classmethod
    def _roles(cls, roles: dict[str, list[dict[str, str]]]) -> dict[str, list[dict[str, str]]]:
        for role, label_sets in roles.items():
            if not role:
                raise ValueError("a role needs a name (roles: {rollout: [...]})")
            if not label_sets or any(not labels for labels in label_sets):
                raise ValueError(
                    f"role {role!r} needs at least one label set, each naming a label: [{{Hostname: node-0}}]"
                )
            for labels in label_sets:
                for label in labels:
                    if not LABEL_NAME.fullmatch(label) or label.startswith("__"):
                        raise ValueError(
                            f"role {role!r}: {label!r} is not a usable label name ([a-zA-Z_][a-zA-Z0-9_]*, not __*)"
                        )
        return roles

    @property
    def scrape_targets(self) -> list[str]:
        """The static scrape targets (empty when they are discovered: ``targets: auto``)."""
        return [] if isinstance(self.scrape.targets, str) else list(self.scrape.targets)

    def resolved_source(self) -> Literal["promql", "scrape"] | None:
        """Which producer reads infrastructure metrics (``None`` when no source is configured)."""
        if self.source != "auto":
            return self.source
        if self.prometheus.url is not None:
            return "promql"
        if self.scrape.targets:
            return "scrape"
        return None

    @classmethod
    def load(
        cls,
        source: str | Path | Mapping[str, Any] | BridgeConfig | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> BridgeConfig:
        """Build a validated config from a YAML file path, a mapping, or nothing (defaults), plus env overrides."""
        if isinstance(source, BridgeConfig):
            return source
        what, lines = "otel-bridge config", None
        if source is None:
            data: dict[str, Any] = {}
        elif isinstance(source, str | Path):
            data, lines = read_yaml_lines(Path(source))
            what = f"otel-bridge config file {source}"
        elif isinstance(source, Mapping):
            try:
                data = copy.deepcopy(dict(source))
            except RecursionError:
                raise ConfigError(f"{what} nests lists or mappings too deeply to read; flatten it") from None
        else:
            raise ConfigError(f"config must be a path, a mapping or a BridgeConfig, not {type(source).__name__}")
        data = apply_env_overrides(data, os.environ if environ is None else environ)
        return cls.from_dict(data, what, lines)

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], what: str = "otel-bridge config", lines: Lines | None = None
    ) -> BridgeConfig:
        """Validate a mapping; errors become one :class:`ConfigError` listing every problem (under ``invalid
        <what>``, each with its line in the file when ``lines`` says where the keys are)."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, cls, what, lines)) from None
