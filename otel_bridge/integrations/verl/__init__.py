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
:func:`bridge_config_from_verl`. This package is otel-bridge's one verl entry point: :mod:`~.config` maps verl's names
and settings to the bridge's configuration, :mod:`~.tracking` holds ``Tracking`` and :func:`patch_verl`, :mod:`~.phases`
verl's timed blocks as phases.

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

**Run directory.** ``<run.dir>/<project name>/<run.name>``, whether or not a bridge config file sets ``run.dir``;
``run.name`` is the experiment name unless the bridge config sets it (characters other than letters, digits, ``.``,
``_`` and ``-`` become ``-``). A re-run with the same names gets ``<experiment name>-2`` and so on: it never appends
to the earlier run's files or tracker runs. verl's
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

from otel_bridge.integrations.verl.config import (
    RL_INSIGHT,
    UNSUPPORTED_VERL_BACKENDS,
    VERL_BACKENDS,
    BridgeConfigSource,
    bridge_config_from_verl,
    supported_backends,
    verl_bridge_config,
    verl_file_logger_path,
    verl_served_model_name,
    verl_trackers,
)
from otel_bridge.integrations.verl.tracking import Tracking, patch_verl, setup

__all__ = [
    "RL_INSIGHT",
    "UNSUPPORTED_VERL_BACKENDS",
    "VERL_BACKENDS",
    "BridgeConfigSource",
    "Tracking",
    "bridge_config_from_verl",
    "patch_verl",
    "setup",
    "supported_backends",
    "verl_bridge_config",
    "verl_file_logger_path",
    "verl_served_model_name",
    "verl_trackers",
]
