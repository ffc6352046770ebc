"""The bridge configuration of a verl run: verl's tracker names mapped to otel-bridge's trackers, verl's run naming,
and a configuration from verl's rollout ``PrometheusConfig`` (see :mod:`otel_bridge.integrations.verl`)."""

from __future__ import annotations

import importlib.util
import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from otel_bridge.config import AUTO, BridgeConfig, MetricConfig, TrackerConfig, read_yaml
from otel_bridge.errors import ConfigError
from otel_bridge.exporters.backends.registry import BACKENDS
from otel_bridge.integrations.hparams import plain
from otel_bridge.producers.presets import MODEL_LABELS, PRESETS
from otel_bridge.prometheus.promql import parse_duration

BridgeConfigSource = str | Path | Mapping[str, Any] | BridgeConfig | None
"""What :meth:`Bridge.from_config <otel_bridge.Bridge.from_config>` accepts."""

VERL_BACKENDS: Final[Mapping[str, str]] = {
    "console": "console",
    "tensorboard": "tensorboard",
    "wandb": "wandb",
    "tracking": "wandb",
    "mlflow": "mlflow",
    "trackio": "trackio",
    "file": "jsonl",
    "jsonl": "jsonl",
}
"""verl backend name (plus otel-bridge's ``jsonl``) -> otel-bridge tracker kind."""

RL_INSIGHT: Final = "rl_insight"
"""The verl backend handed to verl's own ``RLInsightLogger`` (no otel-bridge tracker)."""

UNSUPPORTED_VERL_BACKENDS: Final = ("swanlab", "vemlp_wandb", "clearml")
"""verl backends that otel-bridge has no tracker for."""

_UNSAFE_RUN_CHARS: Final = re.compile(r"[^A-Za-z0-9._\-]+")
_SERVED_MODEL_KEY: Final = "actor_rollout_ref.rollout.prometheus.served_model_name"
_log = logging.getLogger(__name__)


def supported_backends() -> list[str]:
    """The ``default_backend`` names this installation accepts (those whose otel-bridge tracker exists, and
    ``rl_insight`` when verl is installed)."""
    names = [name for name, kind in VERL_BACKENDS.items() if kind in BACKENDS]
    if importlib.util.find_spec("verl") is not None:  # finds the package without importing it
        names.append(RL_INSIGHT)
    return sorted(names)


def _backend_names(default_backend: str | Sequence[str]) -> list[str]:
    return [default_backend] if isinstance(default_backend, str) else list(default_backend)


def verl_file_logger_path(project_name: str, experiment_name: str) -> Path:
    """Where verl's ``file`` backend (``verl.utils.tracking.FileLogger``) writes: ``$VERL_FILE_LOGGER_PATH``, else
    ``$VERL_FILE_LOGGER_ROOT`` (default ``.``, ``~`` expanded) ``/<project_name>/<experiment_name>.jsonl``; absolute."""
    path = os.environ.get("VERL_FILE_LOGGER_PATH")
    if path is None:
        root = os.path.expanduser(os.environ.get("VERL_FILE_LOGGER_ROOT", "."))
        path = os.path.join(root, project_name, f"{experiment_name}.jsonl")
    return Path(path).absolute()


def _safe_name(name: str) -> str:
    return _UNSAFE_RUN_CHARS.sub("-", name).strip("-") or "run"


def verl_trackers(
    default_backend: str | Sequence[str], project_name: str, experiment_name: str, config: Any = None
) -> list[TrackerConfig]:
    """The otel-bridge trackers for verl's ``default_backend`` names (in order, each kind once).

    Raises :class:`ConfigError` for a name otel-bridge has no tracker for, listing the supported names.
    ``rl_insight`` makes no tracker (:class:`Tracking` hands it to verl's ``RLInsightLogger``).
    """
    supported = supported_backends()
    trackers: list[TrackerConfig] = []
    kinds: set[str] = set()
    for name in _backend_names(default_backend):
        if name == RL_INSIGHT:
            if name not in supported:
                raise ConfigError(
                    "default_backend 'rl_insight' is verl's own RLInsightLogger, which needs verl: pip install verl"
                )
            continue
        kind = VERL_BACKENDS.get(name)
        if kind is None or kind not in BACKENDS:
            why = "verl backend with no otel-bridge tracker" if name in UNSUPPORTED_VERL_BACKENDS else "unknown backend"
            raise ConfigError(
                f"default_backend {name!r}: {why}; supported: {', '.join(supported)} "
                "(other trackers can be added under `trackers` in the bridge config)"
            )
        if kind in kinds:
            continue
        kinds.add(kind)
        options = _tracker_options(kind, project_name, experiment_name, config)
        if name == "file":
            options["path"] = str(verl_file_logger_path(project_name, experiment_name))
        trackers.append(TrackerConfig(type=kind, **options))
    return trackers


def _tracker_options(kind: str, project_name: str, experiment_name: str, config: Any) -> dict[str, Any]:
    if kind == "wandb":
        options: dict[str, Any] = {"project": project_name, "name": experiment_name}
        hparams = plain(config) if config is not None else None
        if isinstance(hparams, dict) and hparams:
            options["config"] = hparams
        return options
    if kind == "mlflow":  # verl: "project_name is actually experiment_name in MLflow"
        return {"experiment": project_name, "run_name": experiment_name}
    if kind == "trackio":
        return {"project": project_name, "name": experiment_name}
    if kind == "tensorboard" and os.environ.get("TENSORBOARD_DIR"):
        return {"logdir": str(Path(os.environ["TENSORBOARD_DIR"]).absolute())}
    return {}


def verl_served_model_name(served_model_name: str | None) -> str | None:
    """The ``model_name`` label vLLM/SGLang report for verl's ``rollout.prometheus.served_model_name``, as verl starts
    them (``vllm_async_server.py``, ``async_sglang_server.py``): the last ``/`` segment of a path. verl's default is
    the model path (``${actor_rollout_ref.model.path}``), so ``~/models/deepseek-llm-7b-chat`` is served as
    ``deepseek-llm-7b-chat``."""
    if not served_model_name:
        return None
    return served_model_name.split("/")[-1] if "/" in served_model_name else served_model_name


def rollout_prometheus(config: Any) -> Any:
    """verl's ``actor_rollout_ref.rollout.prometheus`` section of its whole config (a dict, an OmegaConf config or
    verl's dataclasses); ``None`` when it has none."""
    node = config
    for part in ("actor_rollout_ref", "rollout", "prometheus"):
        if node is None:
            return None
        node = node.get(part) if isinstance(node, Mapping) else getattr(node, part, None)
    return node


def verl_bridge_config(
    bridge_config: BridgeConfigSource,
    *,
    project_name: str,
    experiment_name: str,
    default_backend: str | Sequence[str],
    config: Any = None,
) -> BridgeConfig:
    """The bridge configuration :class:`Tracking` runs with: ``bridge_config`` (with env overrides) plus the
    trackers of ``default_backend`` and verl's run naming, where ``bridge_config`` does not set them. When verl's
    ``config`` enables its rollout Prometheus (``actor_rollout_ref.rollout.prometheus.enable``), what
    ``bridge_config`` leaves unset comes from there (:func:`bridge_config_from_verl`): the metrics (the ``vllm``
    preset, of the model verl serves) when it lists none, and, unless it reads ``/metrics`` directly (scrape path), the
    ``prometheus`` settings it does not set (``url: auto`` on verl's ``port``, the scrape interval of verl's
    ``file``)."""
    loaded = BridgeConfig.load(bridge_config)
    verl_prometheus = rollout_prometheus(config)
    if verl_prometheus is not None and _enabled(verl_prometheus):
        derived = bridge_config_from_verl(verl_prometheus, prefix=loaded.naming.infra_prefix)
        update: dict[str, Any] = {}
        if not loaded.metrics:
            update["metrics"] = derived.metrics
        else:
            model = verl_served_model_name(_field(verl_prometheus, "served_model_name"))
            update["metrics"] = with_model_filter(loaded.metrics, model)
        if loaded.resolved_source() in (None, "promql"):
            unset = derived.prometheus.model_fields_set - loaded.prometheus.model_fields_set
            taken = {name: getattr(derived.prometheus, name) for name in unset}
            update["prometheus"] = loaded.prometheus.model_copy(update=taken)
        loaded = loaded.model_copy(update=update)
    explicit = list(loaded.trackers) if "trackers" in loaded.model_fields_set else []
    explicit_kinds = {tracker.type for tracker in explicit}
    mapped = verl_trackers(default_backend, project_name, experiment_name, config)
    trackers = explicit + [tracker for tracker in mapped if tracker.type not in explicit_kinds]
    run_set = loaded.run.model_fields_set
    run = loaded.run.model_copy(
        update={
            "name": loaded.run.name if "name" in run_set else _safe_name(experiment_name),
            # <run.dir>/<project>/<experiment> whether or not the file sets run.dir (init's file does): the run
            # directory does not move with the config file
            "dir": loaded.run.dir / _safe_name(project_name),
        }
    )
    return loaded.model_copy(update={"trackers": trackers, "run": run})


def with_model_filter(metrics: Sequence[MetricConfig], model: str | None) -> list[MetricConfig]:
    """``metrics`` (a bridge config file's) with verl's model filter: every entry of a preset whose metrics carry a
    model label (:data:`~otel_bridge.producers.presets.MODEL_LABELS`), and every entry naming one of those metrics,
    matches only ``model``, the model verl serves; unless an entry already names models itself, in which case the
    file's filters are kept as they are. Says at start-up which filter is in force (a WARNING when it differs from
    verl's or verl's was added to entries of the file)."""
    labelled = {
        entry["name"]: label for preset, label in MODEL_LABELS.items() for entry in PRESETS[preset] if "name" in entry
    }

    def model_label(entry: MetricConfig) -> str | None:
        if entry.preset is not None:
            return MODEL_LABELS.get(entry.preset)
        return labelled.get(entry.name) if entry.name is not None else None

    targeted = [(index, entry, label) for index, entry in enumerate(metrics) if (label := model_label(entry))]
    named = [(index, label, entry.labels[label]) for index, entry, label in targeted if label in entry.labels]
    if not targeted or model is None:
        return list(metrics)
    if named:
        others = [f"metrics[{index}] {label}={value!r}" for index, label, value in named if value != model]
        if others:
            _log.warning(
                "otel-bridge: verl serves model %r (%s), but the bridge config file filters other models (%s): those "
                "filters are in force",
                model,
                _SERVED_MODEL_KEY,
                ", ".join(others),
            )
        return list(metrics)
    filtered = list(metrics)
    for index, entry, label in targeted:
        filtered[index] = entry.model_copy(update={"labels": {**entry.labels, label: model}})
    _log.warning(
        "otel-bridge: the bridge config file's metrics name no model: metrics%s read only model %s=%r, the model verl "
        "serves (%s); set labels.%s on those entries to read another",
        [index for index, _, _ in targeted],
        targeted[0][2],
        model,
        _SERVED_MODEL_KEY,
        targeted[0][2],
    )
    return filtered


def bridge_config_from_verl(
    prometheus_cfg: Any,
    *,
    prefix: str = "rollout",
    metrics_to_log: list[str] | None = None,
    **overrides: Any,
) -> BridgeConfig:
    """A bridge config from verl's rollout ``PrometheusConfig`` (an object or a mapping), for a trainer that builds
    its :class:`~otel_bridge.Bridge` itself instead of using :class:`Tracking`.

    ``enable`` switches the infrastructure metrics on; ``port`` is Prometheus' port on the Ray head (found as
    ``prometheus.url: auto``); ``file`` is the prometheus.yml verl writes (its ``global.scrape_interval`` is used);
    ``served_model_name`` selects that model's series, named as verl serves it (:func:`verl_served_model_name`);
    ``metrics_to_log`` (an argument: verl's ``PrometheusConfig`` has no such field and refuses it) lists the metric
    names to log, default the ``vllm`` preset. Keys start with ``prefix`` (``rollout/vllm/...``).
    ``overrides`` are further top-level config sections (``trackers=[...]``, ``run={...}``).
    """

    data: dict[str, Any] = {"naming": {"infra_prefix": prefix}, **overrides}
    if not _enabled(prometheus_cfg):
        return BridgeConfig.from_dict(data)
    if metrics_to_log is not None:
        names = _names(metrics_to_log, "bridge_config_from_verl(metrics_to_log=...)")
    else:
        names = _names(_field(prometheus_cfg, "metrics_to_log"), f"{VERL_PROMETHEUS}.metrics_to_log")
    model = verl_served_model_name(_text(prometheus_cfg, "served_model_name"))
    labels = {"model_name": model} if model else {}
    entries = [{"name": name} for name in names] if names else [dict(entry) for entry in PRESETS["vllm"]]
    prometheus: dict[str, Any] = {"url": AUTO, "ray_port": _port(prometheus_cfg)}
    interval = _scrape_interval_from(_path(prometheus_cfg, "file"))
    if interval is not None:
        prometheus["scrape_interval_s"] = interval
    data.update({"prometheus": prometheus, "metrics": [{**entry, "labels": labels} for entry in entries]})
    return BridgeConfig.from_dict(data)


def _field(section: Any, name: str, default: Any = None) -> Any:
    if isinstance(section, Mapping):
        return section.get(name, default)
    return getattr(section, name, default)


VERL_PROMETHEUS: Final = "actor_rollout_ref.rollout.prometheus"
"""Where verl keeps the rollout Prometheus settings the bridge reads; its errors name the keys under it."""


def _shown(value: Any) -> str:
    """``value`` as an error quotes it: its type and at most 100 characters of its ``repr()``."""
    text = repr(value)
    return f"{type(value).__name__} {text[:100]}{'...' if len(text) > 100 else ''}"


def _enabled(section: Any) -> bool:
    """verl's ``enable``: a boolean (``"false"``, a string, would be true in Python)."""
    value = _field(section, "enable", False)
    if value is None or isinstance(value, bool):
        return bool(value)
    raise ConfigError(f"{VERL_PROMETHEUS}.enable must be true or false, not the {_shown(value)}")


def _port(section: Any) -> int:
    """verl's ``port``: a whole number from 1 to 65535 (Prometheus' port on the Ray head); default 9090."""
    value = _field(section, "port", 9090)
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535:
        return value
    raise ConfigError(f"{VERL_PROMETHEUS}.port must be a whole number from 1 to 65535, not the {_shown(value)}")


def _text(section: Any, name: str) -> str | None:
    value = _field(section, name)
    if value is None or isinstance(value, str):
        return value
    raise ConfigError(f"{VERL_PROMETHEUS}.{name} must be a string, not the {_shown(value)}")


def _path(section: Any, name: str) -> str | None:
    value = _field(section, name)
    if value is None or isinstance(value, str | os.PathLike):
        return os.fspath(value) if value is not None else None
    raise ConfigError(f"{VERL_PROMETHEUS}.{name} must be a path, not the {_shown(value)}")


def _names(value: Any, key: str) -> list[str] | None:
    """A list of metric names (a list, a tuple, an OmegaConf ``ListConfig``): a single string is refused, not read
    as its characters."""
    if value is None:
        return None
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        raise ConfigError(f"{key} must be a list of metric names, not the {_shown(value)}")
    bad = [item for item in value if not isinstance(item, str)]
    if bad:
        raise ConfigError(f"{key} must be a list of metric names; {_shown(bad[0])} is not a name")
    return list(value)


def _scrape_interval_from(file: str | os.PathLike[str] | None) -> float | None:
    """``global.scrape_interval`` of a prometheus.yml, in seconds (``None`` when the file is absent or silent)."""
    try:
        if not file or not Path(file).is_file():
            return None
    except OSError as exc:  # a name too long for the filesystem
        raise ConfigError(f"{VERL_PROMETHEUS}.file {_shown(file)} cannot be a file here: {exc.strerror}") from None
    text = str((read_yaml(Path(file)).get("global") or {}).get("scrape_interval", ""))
    try:
        return parse_duration(text)
    except ConfigError:
        return None
