"""``otel-bridge init``: write a commented starter config for the scrape path or the PromQL path.

Every section of the configuration is in the file, with what it does; the keys the chosen path does not use are
commented out. The text is validated as a :class:`~otel_bridge.config.BridgeConfig` before it is written, and an
existing file is never overwritten without ``--force``. ``examples/otel-bridge.yaml`` is this command's output for
``--scrape 127.0.0.1:8000 127.0.0.1:8001 --tracker jsonl --tracker tensorboard``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, TextIO

import yaml

from otel_bridge.cli.inputs import check_url, printable
from otel_bridge.errors import ConfigError
from otel_bridge.producers import PRESETS as PRESET_METRICS

DEFAULT_PATH: Final = Path("otel-bridge.yaml")
TRACKERS: Final = ("jsonl", "tensorboard", "console", "wandb", "mlflow", "trackio")
PRESETS: Final = tuple(PRESET_METRICS)
"""Every preset the library ships (docs/configuration.md, "Presets")."""
PASSWORD_ENV: Final = "PROMETHEUS_PASSWORD"
"""The environment variable a config written from ``--prometheus http://user:password@host`` reads the password
from: the password itself is never written."""

_TRACKER_LINES: Final[dict[str, tuple[str, ...]]] = {
    "jsonl": ("- type: jsonl               # <run.dir>/<run.name>/metrics.jsonl, one JSON object per step",),
    "tensorboard": ("- type: tensorboard         # <run.dir>/<run.name>/tensorboard (needs the tensorboard extra)",),
    "console": ("- type: console             # one line per step on stdout", "  every: 1"),
    "wandb": (
        "- type: wandb               # needs the wandb extra; attaches to an active wandb run if any",
        "  project: my-project",
        "  mode: online              # or offline",
    ),
    "mlflow": (
        "- type: mlflow              # needs the mlflow extra",
        "  tracking_uri: sqlite:///mlflow.db",
        "  experiment: my-experiment",
    ),
    "trackio": ("- type: trackio             # needs the trackio extra", "  project: otel-bridge"),
}


def add_parser(commands: Any) -> None:
    """Register ``init`` on the sub-command parsers ``commands``."""
    init = commands.add_parser(
        "init",
        help="write a commented starter config (otel-bridge.yaml)",
        description="Write a commented otel-bridge config with every section, for the scrape path (--scrape: the "
        "bridge reads the rollout servers' /metrics) or the PromQL path (--prometheus: through a Prometheus server). "
        "Load it with otel_bridge.install(PATH) or Bridge.from_config(PATH); check it with otel-bridge doctor.",
    )
    init.add_argument(
        "path", nargs="?", type=Path, default=DEFAULT_PATH, help=f"where to write (default {DEFAULT_PATH})"
    )
    source = init.add_mutually_exclusive_group(required=True)
    source.add_argument("--scrape", nargs="+", metavar="HOST:PORT", help="rollout servers' /metrics endpoints")
    source.add_argument("--prometheus", metavar="URL", help="Prometheus base URL (e.g. http://127.0.0.1:9090) or auto")
    init.add_argument(
        "--tracker",
        action="append",
        choices=TRACKERS,
        metavar="TYPE",
        help=f"a tracker (repeat; one of {', '.join(TRACKERS)}; default jsonl)",
    )
    init.add_argument(
        "--preset", choices=PRESETS, default="vllm", help=f"the metric set: {', '.join(PRESETS)} (default vllm)"
    )
    init.add_argument("--force", action="store_true", help="overwrite PATH if it exists")
    init.set_defaults(run=run)


def _scalar(value: Any) -> str:
    """``value`` as a YAML flow scalar/list (JSON is YAML)."""
    return json.dumps(value) if not isinstance(value, str) or not _plain(value) else value


def _plain(text: str) -> bool:
    try:
        return bool(text) and yaml.safe_load(text) == text and ": " not in text and " #" not in text
    except yaml.YAMLError:
        return False


def _commented(lines: Sequence[str], active: bool) -> list[str]:
    return list(lines) if active else [f"# {line}" if line else "#" for line in lines]


def starter_config(
    *,
    scrape: Sequence[str] = (),
    prometheus: str | None = None,
    trackers: Sequence[str] = ("jsonl",),
    preset: str = "vllm",
    username: str | None = None,
) -> str:
    """The commented YAML text ``otel-bridge init`` writes (exactly one of ``scrape`` / ``prometheus``); with
    ``username``, basic auth whose password is read from ``$PROMETHEUS_PASSWORD``."""
    if bool(scrape) == (prometheus is not None):
        raise ConfigError("choose the path: --scrape HOST:PORT ... (read /metrics directly) or --prometheus URL")
    unknown = [t for t in trackers if t not in TRACKERS]
    if unknown:
        raise ConfigError(f"unknown tracker(s) {unknown}; choose from {', '.join(TRACKERS)}")
    promql = prometheus is not None
    lines = [
        "# otel-bridge configuration: one record per training step, the trainer's metrics and what the rollout",
        "# servers did during that step. Written by `otel-bridge init`; every section is here, with its defaults.",
        "#   check it:  otel-bridge doctor --config <this file>",
        '#   use it:    bridge = otel_bridge.install("<this file>")   (or Bridge.from_config("<this file>"))',
        "# Any key can be overridden from the environment: OTEL_BRIDGE__<SECTION>__<KEY>=value.",
        "",
        "# strict: start-up fails when Prometheus / the endpoints do not answer or a query is invalid;",
        "# degrade: warn, run without infrastructure metrics and retry at every step.",
        "startup: strict",
        "",
        "# Where infrastructure metrics come from. auto: promql when prometheus.url is set, else scrape.",
        "source: auto",
        "",
        "# PromQL path: a Prometheus server that scrapes the rollout servers",
        "# (write its config with: otel-bridge prometheus-config prometheus.yml --rollout HOST:PORT ...).",
        *_commented(
            [
                "prometheus:",
                f"  url: {_scalar(prometheus or 'http://127.0.0.1:9090')}"
                "   # or auto: $OTEL_BRIDGE_PROMETHEUS_URL, $RAY_PROMETHEUS_HOST, the Ray head",
                "  scrape_interval_s: 15     # Prometheus' scrape interval until its targets list says otherwise",
                "  boundary: auto            # scrape: exact step boundaries; samples: Prometheus' last sample",
                "  timeout_s: 10",
                *(
                    [
                        "  auth:                      # secrets come from an env variable or a file, never inline",
                        f"    username: {_scalar(username)}",
                        f"    password_env: {PASSWORD_ENV}  # or password_file: /path/to/file",
                    ]
                    if username is not None
                    else [
                        "  # auth:                    # secrets come from an env variable or a file, never inline",
                        "  #   bearer_token_env: PROMETHEUS_TOKEN",
                    ]
                ),
            ],
            promql,
        ),
        "",
        "# Scrape path (no Prometheus needed): the bridge reads the rollout servers' /metrics itself.",
        *_commented(
            [
                "scrape:",
                f"  targets: {_scalar(list(scrape) or ['127.0.0.1:8000'])}"
                "   # host:port or URLs; auto: Ray's service-discovery file",
                "  sample_interval_s: 1      # in-step sampling for gauge max/mean; 0 switches it off",
                "  timeout_s: 5",
            ],
            not promql,
        ),
        "",
        f"# What to read. A preset is a ready metric set ({', '.join(PRESETS)});",
        "# single metrics take name, type, stats.",
        "metrics:",
        f"  - preset: {preset}",
        "  # - name: vllm:num_requests_waiting",
        "  #   type: gauge                 # counter, gauge or histogram",
        "  #   stats: [max, mean]",
        "  # - alias: rollout_tokens_per_s  # PromQL path only: any expression ($window is the step's length)",
        "  #   promql: sum(rate(vllm:generation_tokens_total[$window]))",
        "",
        "# What each GPU serves, for `by: [role]`: role -> label sets by host, pod or GPU index (docs/gpu-time.md).",
        "# roles:",
        "#   rollout: [{Hostname: gpu-node-0}]",
        "#   trainer: [{Hostname: gpu-node-1}]",
        "",
        "# At most this many label groups (values of `by`) per metric in one record; the rest is folded into _other",
        "# and counted in otel_bridge/groups_dropped (metrics[].max_groups sets it for one metric).",
        "# max_groups: 100",
        "",
        "# Where records go. Relative paths are under <run.dir>/<run.name>/.",
        "trackers:",
    ]
    chosen = list(dict.fromkeys(trackers))
    for kind in chosen:
        lines.extend("  " + line for line in _TRACKER_LINES[kind])
    for kind in TRACKERS:
        if kind not in chosen:
            lines.extend("  # " + line for line in _TRACKER_LINES[kind])
    lines += [
        "",
        "# Tracker keys: infrastructure keys start with this prefix (rollout/vllm/generation_tokens_total/delta).",
        "naming:",
        "  infra_prefix: rollout",
        "",
        "# This run's files: <dir>/<name>/ (name default: otel-bridge-<UTC timestamp>); a re-run of a name writes to",
        "# <name>-2, -3, ...: never into an earlier run's files.",
        "run:",
        "  dir: runs",
        "  # name: my-run",
        "",
        "# The worker that assembles and delivers records off the training thread.",
        "delivery:",
        "  rank: 0                     # only this rank ($RANK, or otel.rank) writes to the trackers",
        "  backend_retries: 3          # retries of a failed tracker write",
        "  close_timeout_s: 60         # longest wait in close() for pending records",
        "",
        "# The trainer's OpenTelemetry instruments can also go to Prometheus and to a collector.",
        "otel:",
        "  # service_name: my-trainer",
        "  prometheus:",
        "    enabled: false            # serve them on http://127.0.0.1:9464/metrics",
        "    port: 9464",
        "  otlp:",
        "    enabled: false            # push them over OTLP/HTTP ($OTEL_EXPORTER_OTLP_ENDPOINT)",
    ]
    text = "\n".join(lines) + "\n"
    _validate(text)
    return text


def _validate(text: str) -> None:
    from otel_bridge.config import BridgeConfig

    BridgeConfig.from_dict(yaml.safe_load(text))


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Write the starter config."""
    path: Path = args.path
    shown = printable(str(path)) if len(str(path)) <= 120 else printable(str(path)[:117]) + "..."
    prometheus, username, dropped_password = args.prometheus, None, False
    if prometheus is not None and prometheus.strip() != "auto":
        checked = check_url(prometheus, "--prometheus")
        prometheus, username, dropped_password = checked.url, checked.username, checked.had_password
    text = starter_config(
        scrape=args.scrape or (),
        prometheus=prometheus,
        trackers=args.tracker or ("jsonl",),
        preset=args.preset,
        username=username,
    )
    try:
        if path.exists() and not args.force:
            raise ConfigError(f"{shown} exists; pass --force to overwrite it, or give another PATH")
        write_text_atomically(path, text)
    except OSError as exc:
        raise ConfigError(f"cannot write {shown}: {exc.strerror}; choose a writable PATH") from None
    if not args.quiet:
        out.write(f"wrote {shown}\ncheck it: otel-bridge doctor --config {shown}\n")
        if dropped_password:
            out.write(
                f"the password in --prometheus was not written: the config reads it from ${PASSWORD_ENV} "
                f"(export {PASSWORD_ENV}=...), or set prometheus.auth.password_file\n"
            )
    return 0
