"""A Prometheus configuration for the Ray pipeline: Ray's metrics, the rollout servers and the trainer.

Up to three scrape jobs, each optional:

- ``ray`` (``ray_sd_file``): Ray's service-discovery file through ``file_sd_configs``; Prometheus re-reads it as Ray
  rewrites it, so nodes that join or leave are followed. The file's own ``job`` label is overwritten with the job name
  so that ``up{job="<ray_job>"}`` selects them whatever the file says.
- ``rollout`` (``rollout_targets``): the rollout servers (vLLM / SGLang), static ``host:port`` targets, or
  ``rollout_sd_file``: a ``file_sd`` file that :func:`write_targets_file` keeps up to date (e.g. from a
  :class:`~otel_bridge.discovery.TargetWatcher`'s ``on_change``), so Prometheus follows the servers without a reload.
- ``trainer`` (``trainer_target``): the trainer's own ``/metrics`` endpoint (e.g. the OpenTelemetry Prometheus
  exporter), static.

:func:`write_prometheus_config` writes it atomically (temporary file in the same directory, then ``os.replace``), so a
Prometheus watching the file never reads half of it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from otel_bridge.discovery import normalize_targets
from otel_bridge.errors import ConfigError
from otel_bridge.prometheus import promql

_log = logging.getLogger(__name__)

_JOB_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def _duration(seconds: float, key: str) -> str:
    if not seconds > 0:
        raise ConfigError(f"{key} = {seconds} must be > 0 seconds")
    try:
        return promql.duration(seconds)
    except ConfigError as exc:
        raise ConfigError(f"{key} = {seconds}: {exc}") from None


def _metrics_path(value: str, key: str) -> str:
    if not value.startswith("/") or any(c.isspace() for c in value) or "?" in value:
        raise ConfigError(f"{key} = {value!r} must be an absolute URL path like /metrics (no query, no spaces)")
    return value


def prometheus_config(
    *,
    ray_sd_file: str | os.PathLike[str] | None = None,
    rollout_targets: Sequence[str] = (),
    rollout_sd_file: str | os.PathLike[str] | None = None,
    trainer_target: str | None = None,
    scrape_interval_s: float = 15.0,
    scrape_timeout_s: float | None = None,
    evaluation_interval_s: float | None = None,
    sd_refresh_interval_s: float = 5.0,
    rollout_metrics_path: str = "/metrics",
    trainer_metrics_path: str = "/metrics",
    ray_job: str = "ray",
    rollout_job: str = "rollout",
    trainer_job: str = "trainer",
    external_labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The Prometheus configuration (``prometheus.yml`` as a dict) described in the module docstring.

    At least one job must be configured. ``scrape_timeout_s`` defaults to ``scrape_interval_s`` (Prometheus requires
    it not to exceed the interval). Raises :class:`ConfigError` naming the argument for bad targets, durations, paths
    or job names.
    """
    interval = _duration(scrape_interval_s, "scrape_interval_s")
    timeout_s = scrape_interval_s if scrape_timeout_s is None else scrape_timeout_s
    timeout = _duration(timeout_s, "scrape_timeout_s")
    if timeout_s > scrape_interval_s:
        raise ConfigError(
            f"scrape_timeout_s = {timeout_s} exceeds scrape_interval_s = {scrape_interval_s}; Prometheus refuses "
            "that: lower the timeout or raise the interval"
        )
    evaluation = _duration(
        scrape_interval_s if evaluation_interval_s is None else evaluation_interval_s, "evaluation_interval_s"
    )
    refresh = _duration(sd_refresh_interval_s, "sd_refresh_interval_s")
    if isinstance(rollout_targets, str):
        raise ConfigError(f"rollout_targets must be a list of 'host:port', not one string ({rollout_targets!r})")
    if rollout_targets and rollout_sd_file is not None:
        raise ConfigError("set either rollout_targets (static) or rollout_sd_file (file_sd), not both")
    used = (
        (ray_job, ray_sd_file is not None),
        (rollout_job, bool(rollout_targets) or rollout_sd_file is not None),
        (trainer_job, trainer_target is not None),
    )
    jobs = [name for name, is_used in used if is_used]
    for key, name in (("ray_job", ray_job), ("rollout_job", rollout_job), ("trainer_job", trainer_job)):
        if not _JOB_NAME.match(name):
            raise ConfigError(f"{key} = {name!r} must be a non-empty job name of letters, digits, '_', '.', '-'")
    if len(set(jobs)) != len(jobs):
        raise ConfigError(
            f"job names must differ: ray_job={ray_job!r}, rollout_job={rollout_job!r}, trainer_job={trainer_job!r}"
        )

    scrape_configs: list[dict[str, Any]] = []
    if ray_sd_file is not None:
        scrape_configs.append(
            {
                "job_name": ray_job,
                "file_sd_configs": [{"files": [str(Path(ray_sd_file))], "refresh_interval": refresh}],
                # Ray's file labels its targets job="ray"; a discovered label would win over job_name.
                "relabel_configs": [{"target_label": "job", "replacement": ray_job}],
            }
        )
    rollout = normalize_targets(rollout_targets, "rollout_targets[]")
    if rollout or rollout_sd_file is not None:
        job: dict[str, Any] = {
            "job_name": rollout_job,
            "metrics_path": _metrics_path(rollout_metrics_path, "rollout_metrics_path"),
        }
        if rollout_sd_file is not None:
            job["file_sd_configs"] = [{"files": [str(Path(rollout_sd_file))], "refresh_interval": refresh}]
        else:
            job["static_configs"] = [{"targets": rollout}]
        scrape_configs.append(job)
    if trainer_target is not None:
        trainer = normalize_targets([trainer_target], "trainer_target")
        scrape_configs.append(
            {
                "job_name": trainer_job,
                "metrics_path": _metrics_path(trainer_metrics_path, "trainer_metrics_path"),
                "static_configs": [{"targets": trainer}],
            }
        )
    if not scrape_configs:
        raise ConfigError(
            "the Prometheus config would scrape nothing: give ray_sd_file, rollout_targets (or rollout_sd_file) "
            "and/or trainer_target"
        )
    global_section: dict[str, Any] = {
        "scrape_interval": interval,
        "scrape_timeout": timeout,
        "evaluation_interval": evaluation,
    }
    if external_labels:
        bad = [name for name in external_labels if not _LABEL_NAME.match(name) or name.startswith("__")]
        if bad:
            raise ConfigError(f"external_labels names {bad} are not valid label names ([a-zA-Z_][a-zA-Z0-9_]*)")
        global_section["external_labels"] = {str(k): str(v) for k, v in external_labels.items()}
    return {"global": global_section, "scrape_configs": scrape_configs}


def _atomic_write(path: Path, text: str, what: str) -> None:
    path = Path(path)
    directory = path.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise ConfigError(f"cannot write the {what} to {path}: {exc.strerror or exc}; choose a writable path") from None
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"cannot write the {what} to {path}: {exc.strerror or exc}; choose a writable path") from None


def write_prometheus_config(path: str | os.PathLike[str], config: Mapping[str, Any]) -> Mapping[str, Any]:
    """Write ``config`` (from :func:`prometheus_config`) as YAML to ``path`` atomically; returns it."""
    header = "# Generated by otel-bridge (otel_bridge.tools.prometheus_files); regenerate rather than edit.\n"
    _atomic_write(Path(path), header + yaml.safe_dump(dict(config), sort_keys=False), "Prometheus config")
    _log.info("wrote Prometheus config %s (jobs: %s)", path, ", ".join(j["job_name"] for j in config["scrape_configs"]))
    return config


class _RuleFileDumper(yaml.SafeDumper):
    """YAML with an expression of several lines as a literal block (``expr: |``), line for line."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_RuleFileDumper.add_representer(str, _represent_str)


def write_rule_file(path: str | os.PathLike[str], document: Mapping[str, Any]) -> None:
    """Write a Prometheus rule file (``groups: [...]``) to ``path`` atomically."""
    header = "# Generated by otel-bridge prometheus-rules; the bridge uses these rules unchanged or not at all.\n"
    text = yaml.dump(dict(document), Dumper=_RuleFileDumper, sort_keys=False, width=1000)
    _atomic_write(Path(path), header + text, "rule file")
    _log.info("wrote Prometheus rule file %s", path)


def write_targets_file(
    path: str | os.PathLike[str], targets: Sequence[str], *, labels: Mapping[str, str] | None = None
) -> None:
    """Write ``targets`` (``host:port``) as a Prometheus ``file_sd`` JSON file, atomically.

    Fits a :class:`~otel_bridge.discovery.TargetWatcher` callback:
    ``on_change=lambda t: write_targets_file(sd_path, t)`` with ``rollout_sd_file=sd_path`` in the config.
    """
    if isinstance(targets, str):
        raise ConfigError(f"targets must be a list of 'host:port', not one string ({targets!r})")
    checked = normalize_targets(targets, "targets[]")
    group: dict[str, Any] = {"targets": checked}
    if labels:
        bad = [name for name in labels if not _LABEL_NAME.match(name)]
        if bad:
            raise ConfigError(f"labels {bad} are not valid label names ([a-zA-Z_][a-zA-Z0-9_]*)")
        group["labels"] = {str(k): str(v) for k, v in labels.items()}
    _atomic_write(Path(path), json.dumps([group], indent=2) + "\n", "targets file")
