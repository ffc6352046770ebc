"""verl's ``Tracking`` on an otel-bridge :class:`~otel_bridge.Bridge`, and :func:`patch_verl`, which makes verl's
trainer build it (see :mod:`otel_bridge.integrations.verl`)."""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from otel_bridge.bridge import Bridge
from otel_bridge.config import ENV_CONFIG_FILE, BridgeConfig
from otel_bridge.errors import ConfigError
from otel_bridge.exporters.backends.base import Backend
from otel_bridge.exporters.delivery import DeliveryReport
from otel_bridge.integrations.hparams import plain, save_hyperparameters
from otel_bridge.integrations.verl import phases
from otel_bridge.integrations.verl.config import (
    RL_INSIGHT,
    VERL_BACKENDS,
    BridgeConfigSource,
    _backend_names,
    supported_backends,
    verl_bridge_config,
)
from otel_bridge.ratelimit import RateLimitedLogger

_log = logging.getLogger(__name__)


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
        hparams = plain(config) if config is not None else None  # a cyclic or too deep config: a ConfigError now
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
            if hparams is not None:
                save_hyperparameters(self.bridge, hparams)
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


def patch_verl(
    bridge_config: BridgeConfigSource = None, *, module: str = "verl.utils.tracking", warn_unused: bool = True
) -> Callable[[], None]:
    """Make verl build otel-bridge's :class:`Tracking` (with ``bridge_config``) in this process: wherever it imports
    ``Tracking`` from ``verl.utils.tracking`` after this call (``RayPPOTrainer.fit()``), and in every verl module
    already imported that bound verl's class at import time (verl 0.9's ``trainer/ppo/v1/trainer_base.py``), which
    is rebound with a WARNING (a ``Tracking`` built before the call keeps verl's own).

    The trackers it creates close from an ``atexit`` hook. With ``warn_unused``, a process that exits without verl
    having built a ``Tracking`` logs a WARNING: the patch went into a process where verl's trainer does not run (with
    ``python -m verl.trainer.main_ppo`` that is the Ray actor ``TaskRunner``: use :func:`setup`). Returns a function
    that restores verl's own class. Raises :class:`ConfigError` when verl is not installed.
    """
    try:
        target: Any = importlib.import_module(module)
    except ImportError as err:
        raise ConfigError(f"patch_verl() needs verl ({module} cannot be imported: {err}); pip install verl") from err
    original = target.Tracking
    built: list[int] = []

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
            built.append(1)
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
    restore_phases = phases.patch_phases(target)  # verl's marked_timer blocks become phases (wraps Tracking again)
    patched = target.Tracking
    bound = sorted(
        name
        for name, loaded in list(sys.modules.items())
        if name.startswith("verl.") and name != module and getattr(loaded, "Tracking", None) is original
    )
    for name in bound:
        setattr(sys.modules[name], "Tracking", patched)  # noqa: B010 - a module attribute mypy cannot see
    if bound:
        _log.warning(
            "patch_verl() came after %s imported verl's Tracking; rebound it there, but a Tracking already built "
            "keeps verl's own: patch before verl's trainer starts (docs/verl.md)",
            ", ".join(bound),
        )

    def unused() -> None:
        if not built:
            _log.warning(
                "patch_verl() was called in this process (pid %d) but verl built no Tracking here: with python -m "
                "verl.trainer.main_ppo verl's trainer runs in the Ray actor TaskRunner; use the runtime_env setup "
                "hook otel_bridge.integrations.verl.setup (docs/verl.md)",
                os.getpid(),
            )

    if warn_unused:
        atexit.register(unused)

    def restore() -> None:
        restore_phases()
        if warn_unused:
            atexit.unregister(unused)
        target.Tracking = original
        for name in bound:
            if getattr(sys.modules.get(name), "Tracking", None) is patched:
                setattr(sys.modules[name], "Tracking", original)  # noqa: B010

    return restore


def setup() -> None:
    """Ray's ``worker_process_setup_hook`` for verl: :func:`patch_verl` in every Ray worker process before it runs
    anything, so verl's trainer actor builds otel-bridge's :class:`Tracking` with verl's own entry point unchanged::

        python -m verl.trainer.main_ppo ... \\
            +ray_kwargs.ray_init.runtime_env.worker_process_setup_hook=otel_bridge.integrations.verl.setup

    The bridge config is the file ``$OTEL_BRIDGE_CONFIG`` names (optional: trackers, metrics, ...), and the
    infrastructure source verl's own ``actor_rollout_ref.rollout.prometheus`` when the file names none. A process
    without verl installed (not one of verl's) is left alone; a ``$OTEL_BRIDGE_CONFIG`` that is not a file raises
    :class:`ConfigError`, which Ray reports as the worker's start-up failure.
    """
    path = os.environ.get(ENV_CONFIG_FILE, "").strip()
    if path:
        shown = repr(path) if len(path) <= 200 else f"{path[:200]!r}... ({len(path)} characters)"
        try:
            is_file = Path(path).is_file()
        except OSError as exc:  # ENAMETOOLONG: a value that is no path (YAML text put in the variable)
            raise ConfigError(
                f"${ENV_CONFIG_FILE} names {shown}, which cannot be a file: {exc.strerror}; set it to the config "
                "file's path"
            ) from None
        if not is_file:
            raise ConfigError(f"${ENV_CONFIG_FILE} names {shown}, which is not a file in this Ray worker's filesystem")
    if importlib.util.find_spec("verl") is None:
        return
    patch_verl(BridgeConfig.load(path) if path else None, warn_unused=False)
