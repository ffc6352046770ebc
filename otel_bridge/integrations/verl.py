"""A drop-in for verl's ``verl.utils.tracking.Tracking``: the same constructor and ``log(data, step)``, one
otel-bridge record per step with the rollout servers' metrics of that step beside the trainer's.

::

    from otel_bridge.integrations.verl import Tracking

    logger = Tracking(
        project_name="gsm8k-ppo",
        experiment_name="qwen-0.5b",
        default_backend=["console", "tensorboard"],     # verl's trainer.logger
        config=trainer_config,                            # verl's full config (dict / OmegaConf)
        bridge_config="otel-bridge.yaml",                 # where the rollout servers are, which metrics
    )
    for step in range(1, total_steps + 1):
        metrics = ppo_step()                              # {"actor/pg_loss": ..., "critic/score/mean": ...}
        logger.log(data=metrics, step=step)               # the step's window: previous step's log() -> now
        if step % test_freq == 0:
            logger.log(data=validate(), step=step)        # same step: joins the same record
    logger.finish()                                       # delivers what is pending, closes the trackers

verl's own trainer builds ``Tracking`` inside ``RayPPOTrainer.fit()`` from ``verl.utils.tracking``; call
:func:`patch_verl` before ``fit()`` to make it build this one instead. A trainer that builds its own
:class:`~otel_bridge.Bridge` gets its configuration from verl's rollout ``PrometheusConfig`` with
:func:`bridge_config_from_verl`. This module is otel-bridge's one verl entry point.

**Backend names.** ``default_backend`` takes verl's names (verl 0.9's ``Tracking.supported_backend``): ``console``,
``tensorboard``, ``wandb`` (and the deprecated ``tracking``), ``mlflow``, ``trackio``, ``file``, plus otel-bridge's
``jsonl``, each mapped to the otel-bridge tracker of the same kind when that tracker exists in this installation
(:func:`supported_backends`). verl's ``project_name`` and ``experiment_name`` become the wandb project/name, the MLflow
experiment/run name and the trackio project/name; ``tensorboard`` writes to ``$TENSORBOARD_DIR`` when it is set (as
verl does), else ``<run dir>/tensorboard``. ``file`` is the ``jsonl`` tracker writing where verl's ``FileLogger``
writes (``$VERL_FILE_LOGGER_PATH``, else ``$VERL_FILE_LOGGER_ROOT``, default the working directory,
``/<project_name>/<experiment_name>.jsonl``); its lines are otel-bridge records (one per step: ``step``, ``time``,
``window_start``, then the flat metric keys) where verl writes one ``{"step": ..., "data": {...}}`` line per ``log()``
call, and it appends where verl truncates. ``file`` and ``jsonl`` are the same kind: the first one listed is used.
``rl_insight`` is handed to verl's own ``verl.utils.tracking.RLInsightLogger`` (so it needs verl installed): it gets
each ``log()`` call's ``data`` as in verl (the trainer's metrics, not the rollout servers': rl-insight registers those
itself), and, as in verl, does nothing unless ``VERL_RL_INSIGHT_ENABLE=1``; its errors after start-up are logged, not
raised. verl backends otel-bridge has no tracker for (``swanlab``, ``vemlp_wandb``, ``clearml``) raise
:class:`~otel_bridge.errors.ConfigError` listing the supported names. Trackers listed under ``trackers`` in the
bridge config are kept, and take precedence over a ``default_backend`` name of the same kind.

**Run directory.** Unless the bridge config sets them, ``run.name`` is the experiment name and ``run.dir`` is
``<run.dir>/<project name>`` (characters other than letters, digits, ``.``, ``_`` and ``-`` become ``-``). verl's
``config`` (the hyperparameters) is written to ``<run dir>/hparams.json`` and handed to wandb as its run config.

**Windows.** ``log(data, step)`` is the step's boundary: its window runs from the previous step's boundary to now,
as verl calls it once per step after the step's work. The first call has no window start, so its record carries
gauges only; verl's trainer makes that call for the validation before training (step 0), so every training step has a
complete window. The record then stays open until a later step is logged (or :meth:`Tracking.finish`): another
``log(more, step)`` for the *same* step, such as validation metrics logged apart from the training metrics, joins the
same record instead of starting a new one (its time does not move the window). :meth:`Tracking.step` opens an
explicit window (``with logger.step(n): ...``) for loops that want the first step complete too. Steps must not go
back: ``log()`` for a step earlier than the last one logged raises :class:`~otel_bridge.errors.StepOrderError`.
Values that are not numbers (tables, strings) are skipped with a warning.

**Multi-rank.** verl's single controller creates ``Tracking`` on the driver process only, which delivers. If it is
created in a process whose rank (``otel.rank``, else ``$RANK``) is not ``delivery.rank``, that process writes
nothing to trackers and queries no infrastructure (see :mod:`otel_bridge.integrations`).

**Closing.** There is no ``__del__``: call :meth:`Tracking.finish` (or use ``with Tracking(...) as logger``).
verl's ``RayPPOTrainer.fit()`` does not call ``finish()`` (verl 0.9's v1 trainer calls ``finish(exit_code=...)``,
accepted here); :func:`patch_verl` therefore creates trackers with ``close_at_exit=True``, which closes them from an
``atexit`` hook.
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import logging
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from otel_bridge.bridge import Bridge
from otel_bridge.config import AUTO, BridgeConfig, TrackerConfig, read_yaml
from otel_bridge.errors import ConfigError
from otel_bridge.exporters.backends.base import Backend
from otel_bridge.exporters.backends.registry import BACKENDS
from otel_bridge.exporters.delivery import DeliveryReport
from otel_bridge.integrations import plain, save_hyperparameters, verl_phases
from otel_bridge.producers.presets import PRESETS
from otel_bridge.prometheus.promql import parse_duration
from otel_bridge.ratelimit import RateLimitedLogger

_log = logging.getLogger(__name__)

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


def verl_bridge_config(
    bridge_config: BridgeConfigSource,
    *,
    project_name: str,
    experiment_name: str,
    default_backend: str | Sequence[str],
    config: Any = None,
) -> BridgeConfig:
    """The bridge configuration :class:`Tracking` runs with: ``bridge_config`` (with env overrides) plus the
    trackers of ``default_backend`` and verl's run naming, where ``bridge_config`` does not set them."""
    loaded = BridgeConfig.load(bridge_config)
    explicit = list(loaded.trackers) if "trackers" in loaded.model_fields_set else []
    explicit_kinds = {tracker.type for tracker in explicit}
    mapped = verl_trackers(default_backend, project_name, experiment_name, config)
    trackers = explicit + [tracker for tracker in mapped if tracker.type not in explicit_kinds]
    run_set = loaded.run.model_fields_set
    run = loaded.run.model_copy(
        update={
            "name": loaded.run.name if "name" in run_set else _safe_name(experiment_name),
            "dir": loaded.run.dir if "dir" in run_set else loaded.run.dir / _safe_name(project_name),
        }
    )
    return loaded.model_copy(update={"trackers": trackers, "run": run})


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
    ``served_model_name`` selects that model's series; ``metrics_to_log`` (on the object, or as an argument) lists
    the metric names to log, default the ``vllm`` preset. Keys start with ``prefix`` (``rollout/vllm/...``).
    ``overrides`` are further top-level config sections (``trackers=[...]``, ``run={...}``).
    """

    def field(name: str, default: Any = None) -> Any:
        if isinstance(prometheus_cfg, Mapping):
            return prometheus_cfg.get(name, default)
        return getattr(prometheus_cfg, name, default)

    data: dict[str, Any] = {"naming": {"infra_prefix": prefix}, **overrides}
    if not field("enable", False):
        return BridgeConfig.from_dict(data)
    names = metrics_to_log if metrics_to_log is not None else field("metrics_to_log")
    model = field("served_model_name")
    labels = {"model_name": model} if model else {}
    entries = [{"name": name} for name in names] if names else [dict(entry) for entry in PRESETS["vllm"]]
    prometheus: dict[str, Any] = {"url": AUTO, "ray_port": int(field("port", 9090))}
    interval = _scrape_interval_from(field("file"))
    if interval is not None:
        prometheus["scrape_interval_s"] = interval
    data.update({"prometheus": prometheus, "metrics": [{**entry, "labels": labels} for entry in entries]})
    return BridgeConfig.from_dict(data)


def _scrape_interval_from(file: str | os.PathLike[str] | None) -> float | None:
    """``global.scrape_interval`` of a prometheus.yml, in seconds (``None`` when the file is absent or silent)."""
    if not file or not Path(file).is_file():
        return None
    text = str((read_yaml(Path(file)).get("global") or {}).get("scrape_interval", ""))
    try:
        return parse_duration(text)
    except ConfigError:
        return None


def _rl_insight_logger(project_name: str, experiment_name: str, config: Any) -> Any:
    """verl's own ``RLInsightLogger`` (which imports ``rl_insight`` when ``VERL_RL_INSIGHT_ENABLE=1``)."""
    try:
        from verl.utils.tracking import RLInsightLogger  # verl's own backend; importing verl imports torch & co

        return RLInsightLogger(project_name, experiment_name, config)
    except ImportError as err:
        raise ConfigError(
            f"default_backend 'rl_insight' (verl's RLInsightLogger) cannot start: {err}; install it (pip install "
            "rl-insight) or, when rl-insight is not wanted, unset VERL_RL_INSIGHT_ENABLE or drop 'rl_insight'"
        ) from err


class Tracking:
    """verl's ``Tracking`` interface on an otel-bridge :class:`~otel_bridge.Bridge` (see the module docstring).

    Args:
        project_name: verl's ``trainer.project_name``.
        experiment_name: verl's ``trainer.experiment_name``.
        default_backend: verl's ``trainer.logger``: one name or a list (:func:`supported_backends`).
        config: verl's configuration (hyperparameters), written to ``<run dir>/hparams.json``.
        bridge_config: the bridge configuration (YAML path, dict, :class:`~otel_bridge.BridgeConfig`, or ``None``
            for defaults plus ``OTEL_BRIDGE__...`` environment overrides): rollout servers, metrics, naming.
        backends: extra backend objects (see :meth:`Bridge.from_config <otel_bridge.Bridge.from_config>`).
        close_at_exit: also close from an ``atexit`` hook, for callers that never call :meth:`finish`.

    Raises :class:`~otel_bridge.errors.ConfigError` (and the Bridge's start-up errors) at once when the
    configuration cannot work.
    """

    supported_backend: Final[tuple[str, ...]] = tuple(supported_backends())
    """verl's class attribute: the accepted ``default_backend`` names."""

    def __init__(
        self,
        project_name: str,
        experiment_name: str,
        default_backend: str | Sequence[str] = "console",
        config: Any = None,
        *,
        bridge_config: BridgeConfigSource = None,
        backends: Sequence[Backend] = (),
        close_at_exit: bool = False,
    ) -> None:
        self.project_name = project_name
        self.experiment_name = experiment_name
        self.config = config
        resolved = verl_bridge_config(
            bridge_config,
            project_name=project_name,
            experiment_name=experiment_name,
            default_backend=default_backend,
            config=config,
        )
        self.bridge = Bridge.from_config(resolved, backends=backends)
        self._warn = RateLimitedLogger(_log, resolved.delivery.warn_interval_s)
        self._at_exit = close_at_exit
        self._rl_insight: Any = None
        if close_at_exit:
            atexit.register(self.finish)
        try:
            if RL_INSIGHT in _backend_names(default_backend):
                self._rl_insight = _rl_insight_logger(project_name, experiment_name, config)
            if config is not None:
                save_hyperparameters(self.bridge, config)
        except BaseException:
            self.finish()
            raise

    @property
    def logger(self) -> dict[str, Backend]:
        """verl's ``Tracking.logger``: backend name -> backend (the trackers records are written to)."""
        return {backend.name: backend for backend in self.bridge.backends}

    @property
    def run_dir(self) -> Path:
        """Where this run's files go."""
        return self.bridge.run_dir

    def log(self, data: Mapping[str, Any], step: int, backend: str | Sequence[str] | None = None) -> None:
        """Record verl's metrics ``data`` for ``step``: the step's boundary on the first call for ``step`` (unless
        inside :meth:`step`); later calls for the same ``step`` join its record.

        ``backend`` is accepted for verl compatibility; otel-bridge writes one record per step to every tracker, so
        a ``backend`` that leaves some out is ignored with a warning.
        """
        if backend is not None:
            wanted = {backend} if isinstance(backend, str) else set(backend)
            if not set(self.logger) <= {VERL_BACKENDS.get(name, name) for name in wanted}:
                self._warn.warning(
                    "backend-filter",
                    "Tracking.log(backend=%r): otel-bridge writes each step's record to every tracker (%s)",
                    backend,
                    ", ".join(self.logger),
                )
        self.bridge.log(data, step=step)
        if self._rl_insight is not None and (backend is None or RL_INSIGHT in backend):
            try:
                self._rl_insight.log(data=data, step=step)
            except Exception as exc:  # noqa: BLE001 - rl-insight failing after start-up must not stop training
                self._warn.warning("rl-insight", "verl's RLInsightLogger.log failed at step %s: %s", step, exc)

    @contextmanager
    def step(self, step: int) -> Iterator[None]:
        """An explicit window for ``step``: the time spent in the ``with`` block (``log(data, step)`` inside it joins
        the same record). See :meth:`Bridge.step <otel_bridge.Bridge.step>`."""
        with self.bridge.step(step):
            yield

    def finish(self, exit_code: int = 0) -> DeliveryReport:
        """Deliver every pending step and close the trackers (closing twice returns the same report).

        ``exit_code`` is verl 0.9's argument (its v1 trainer passes 1 after a failure); it is not used.
        """
        if self._at_exit:
            atexit.unregister(self.finish)
            self._at_exit = False
        rl_insight, self._rl_insight = self._rl_insight, None
        try:
            return self.bridge.close()
        finally:
            if rl_insight is not None:
                rl_insight.finish()

    close = finish

    def __enter__(self) -> Tracking:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.finish()

    def __repr__(self) -> str:
        return (
            f"Tracking(project_name={self.project_name!r}, experiment_name={self.experiment_name!r}, {self.bridge!r})"
        )


def patch_verl(bridge_config: BridgeConfigSource = None, *, module: str = "verl.utils.tracking") -> Callable[[], None]:
    """Make verl build otel-bridge's :class:`Tracking` (with ``bridge_config``) wherever it imports
    ``Tracking`` from ``verl.utils.tracking`` after this call, as ``RayPPOTrainer.fit()`` does.

    The trackers it creates close from an ``atexit`` hook (verl never calls ``finish()``). Returns a function that
    restores verl's own class. Raises :class:`ConfigError` when verl is not installed.
    """
    try:
        target: Any = importlib.import_module(module)
    except ImportError as err:
        raise ConfigError(f"patch_verl() needs verl ({module} cannot be imported: {err}); pip install verl") from err
    original = target.Tracking

    class _PatchedTracking(Tracking):
        def __init__(
            self,
            project_name: str,
            experiment_name: str,
            default_backend: str | Sequence[str] = "console",
            config: Any = None,
            **kwargs: Any,
        ) -> None:
            if kwargs:
                _log.warning("otel-bridge Tracking ignores verl arguments it does not know: %s", sorted(kwargs))
            super().__init__(
                project_name,
                experiment_name,
                default_backend,
                config,
                bridge_config=bridge_config,
                close_at_exit=True,
            )

    _PatchedTracking.__name__ = _PatchedTracking.__qualname__ = "Tracking"
    target.Tracking = _PatchedTracking
    restore_phases = verl_phases.patch_phases(target)  # verl's marked_timer blocks become phases

    def restore() -> None:
        restore_phases()
        target.Tracking = original

    return restore
