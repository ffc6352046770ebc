"""``otel-bridge doctor`` checks of this machine: the config, Ray, ``run.dir`` and the trackers."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from otel_bridge.cli.doctor.context import DoctorContext
from otel_bridge.config import AUTO, ENV_PREFIX, BridgeConfig, MetricConfig, TrackerConfig
from otel_bridge.errors import ConfigError, DiscoveryError
from otel_bridge.http import secret_forms
from otel_bridge.producers import resolve_metrics


def check_config(context: DoctorContext) -> BridgeConfig | None:
    """``config``: the file loads and validates; also collects the secrets to scrub."""
    where = str(context.config_path) if context.config_path else "defaults + environment"
    chosen = f"{where} ({context.config_reason})"
    environ = dict(os.environ)
    if context.prometheus_url is not None:
        environ[f"{ENV_PREFIX}PROMETHEUS__URL"] = context.prometheus_url
    try:
        config = BridgeConfig.load(context.config_path, environ=environ)
    except ConfigError as exc:
        named = f"config file {where} " in str(exc) or f"config file {where}:" in str(exc)
        detail = str(exc) if named else f"{where}: {exc}"
        if context.config_path is not None and not context.config_path.is_file():
            fix = (
                f"pass an existing file to --config ({context.config_reason}: {context.config_path} is not a file); "
                "otel-bridge init writes one"
            )
        else:
            fix = "fix each problem the message lists (all of the file's problems are listed at once)"
        context.add("config", "fail", detail, fix)
        return None
    for section, auth in (("prometheus.auth", config.prometheus.auth), ("scrape.auth", config.scrape.auth)):
        try:  # every form a secret takes on the wire is scrubbed: token, password, base64 basic-auth header
            context.add_secrets(secret_forms(auth.bearer_token(), auth.basic_auth()))
        except ConfigError as exc:
            context.add("config", "fail", f"{where}: {section}: {exc}", "provide the secret as the message says")
            return None
    # resolve_metrics warns about deprecated names; the "deprecated" checks report them with the fix instead
    metric_set_log = logging.getLogger(resolve_metrics.__module__)  # its module logger
    level = metric_set_log.level
    metric_set_log.setLevel(logging.ERROR)
    try:
        context.queries = resolve_metrics(config.metrics)
    except ConfigError as exc:
        context.add("config", "fail", f"{where}: {exc}", "fix the metrics entries as the message says")
        return None
    finally:
        metric_set_log.setLevel(level)
    source = config.resolved_source()
    entries = f"{len(config.metrics)} metric entries"
    if not config.metrics and source is not None:
        context.default_preset = "vllm"
        context.queries = resolve_metrics([MetricConfig(preset=context.default_preset)])
        entries = f"no metric entries (the {context.default_preset} preset's metrics are checked)"
    detail = f"{chosen}: valid; infrastructure source: {source or 'none (trainer metrics only)'}, {entries}"
    if context.config_path is None and source is None:
        context.add(
            "config",
            "warn",
            f"{chosen}: nothing is configured (no infrastructure source, no metrics)",
            "run `otel-bridge init` to write ./otel-bridge.yaml, or pass --config / set OTEL_BRIDGE_CONFIG",
        )
        return config
    context.add("config", "pass", detail)
    return config


def check_ray(context: DoctorContext, config: BridgeConfig) -> None:
    """``ray``: when something is discovered from Ray, join the cluster and find its head node."""
    wanted = [
        key
        for key, value in (("prometheus.url", config.prometheus.url), ("scrape.targets", config.scrape.targets))
        if value == AUTO
    ]
    if not wanted:
        context.add("ray", "skip", "nothing is discovered from Ray (no `auto` in prometheus.url / scrape.targets)")
        return
    try:
        from otel_bridge.discovery import head_node_address, import_ray

        ray = import_ray()
        if not ray.is_initialized():
            ray.init(address=context.ray_address, logging_level=logging.ERROR)
        head = head_node_address()
    except (ConfigError, DiscoveryError) as exc:
        context.add("ray", "fail", f"{', '.join(wanted)}: auto: {exc}", "start Ray or configure the address explicitly")
        return
    except Exception as exc:  # noqa: BLE001 - ray.init raises many kinds; each is reported with its type
        context.add(
            "ray",
            "fail",
            f"cannot join the Ray cluster at {context.ray_address!r}: {type(exc).__name__}: {exc}",
            "run on a node of the cluster (ray start --head), pass --ray-address HOST:PORT, or configure "
            f"{' and '.join(wanted)} explicitly",
        )
        return
    context.add("ray", "pass", f"head node {head} (for {', '.join(wanted)}: auto)")


def check_run_dir(context: DoctorContext, run_dir: Path) -> None:
    """``run dir``: ``run.dir`` can be created and written to (the trackers below write into a temporary one)."""
    created = next((p for p in [run_dir, *run_dir.parents][::-1] if not p.exists()), None)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=run_dir, prefix=".otel-bridge-doctor-"):
            pass
    except OSError as exc:
        context.add(
            "run dir",
            "fail",
            f"run.dir {run_dir} is not writable: {exc.strerror or exc}",
            "set run.dir to a directory this user can create and write, or fix its permissions",
        )
        return
    finally:
        if created is not None and created.is_dir():
            shutil.rmtree(created, ignore_errors=True)  # only what this check created
    context.add("run dir", "pass", f"run.dir {run_dir} is writable")


def check_trackers(context: DoctorContext, trackers: Sequence[TrackerConfig]) -> None:
    """``tracker <type>``: each backend imports and writes one record into a temporary run directory."""
    if not trackers:
        context.add("trackers", "warn", "no trackers configured: records go nowhere", "add e.g. {type: jsonl}")
        return
    for tracker in trackers:
        _check_tracker(context, tracker)


def _check_tracker(context: DoctorContext, tracker: TrackerConfig) -> None:
    from otel_bridge.exporters import StepRecord
    from otel_bridge.exporters.backends import create_backend

    name = f"tracker {tracker.type}"
    options = tracker.options()
    if tracker.type == "wandb":
        options = {k: v for k, v in options.items() if k != "dir"} | {"mode": "offline"}
    with tempfile.TemporaryDirectory(prefix="otel-bridge-doctor-") as tmp:
        run_dir = Path(tmp) / "otel-bridge-doctor"
        run_dir.mkdir()
        if tracker.type == "mlflow" and "tracking_uri" not in options and not os.environ.get("MLFLOW_TRACKING_URI"):
            options = options | {"tracking_uri": f"sqlite:///{Path(tmp) / 'mlflow.db'}"}
        record = StepRecord(step=0, values={"otel_bridge/doctor": 1.0}, time=time.time(), window_start=None)
        wandb_env = _temporary_env({"WANDB_SILENT": "true", "WANDB_DIR": tmp}) if tracker.type == "wandb" else None
        try:
            # a tracker library's own prints (MLflow's "View run at ...") go to stderr: stdout is doctor's table or JSON
            with contextlib.redirect_stdout(sys.stderr) if tracker.type != "console" else contextlib.nullcontext():
                backend = create_backend(tracker.type, options, run_dir)
                try:
                    if tracker.type != "console":
                        backend.write(record)
                        backend.flush()
                finally:
                    backend.close()
        except ConfigError as exc:
            context.add(name, "fail", str(exc), "fix the tracker's options or install its extra as the message says")
            return
        except Exception as exc:  # noqa: BLE001 - any failure of a tracker library is reported with its type
            context.add(name, "fail", f"{type(exc).__name__}: {exc}", f"fix the {tracker.type} tracker setup")
            return
        finally:
            if wandb_env is not None:
                wandb_env()
    what = "created (writes to the terminal)" if tracker.type == "console" else "imported, wrote and closed one record"
    context.add(name, "pass", f"{what} (in a temporary run directory{', offline' if tracker.type == 'wandb' else ''})")


def _temporary_env(values: dict[str, str]) -> Callable[[], None]:
    """Set environment variables now; the returned function restores them."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)

    def restore() -> None:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    return restore
