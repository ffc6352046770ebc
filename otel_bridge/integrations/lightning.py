"""A PyTorch Lightning logger: ``Trainer(logger=OtelBridgeLogger(...))`` writes one otel-bridge record per step.

::

    from lightning.pytorch import Trainer
    from otel_bridge.integrations.lightning import OtelBridgeLogger

    logger = OtelBridgeLogger("otel-bridge.yaml")          # or a dict, a BridgeConfig, or a Bridge of your own
    Trainer(max_steps=1000, logger=logger, log_every_n_steps=1).fit(model, data)

Needs the ``lightning`` extra; importing this module without ``lightning`` raises
:class:`~otel_bridge.errors.ConfigError`.

**Records and windows.** Lightning calls ``log_metrics(metrics, step)`` every ``log_every_n_steps`` batches with the
step's ``self.log(...)`` values, and again with validation and epoch-end metrics. A Lightning ``Logger`` gets no call
when a step begins, so the first call for a step is that step's boundary (:meth:`Bridge.log
<otel_bridge.Bridge.log>`): its window runs from the previous step's boundary to this call, i.e. the last
``log_every_n_steps`` batches (and whatever ran between them, such as a validation loop). The first record of a run
has no window start (gauges only). The record then stays open: later calls for the *same* step join it, until values
for a later step arrive or the run ends (``finalize``). Lightning logs validation metrics (``val_check_interval``) and
``on_epoch=True`` metrics at the step number of the training batch before them, so they land in that batch's record.
Values for an *earlier* step, whose record was already sent, cannot join it: they are left out with a rate-limited
WARNING naming the step and keys, and counted in the ``otel_bridge/late_values`` health key of the following records
(:attr:`OtelBridgeLogger.late_values` has the running total). ``step=None`` means the step after the last one.

**Ownership.** Given a configuration, the logger creates its Bridge on first use (``logger.bridge``,
``logger.experiment``, the first ``log_metrics``/``log_hyperparams``), only on the process that logs, and closes it in
``finalize()``. Given a :class:`~otel_bridge.Bridge`, it uses it, sends the open record in ``finalize()`` and leaves
closing to the caller. ``save()`` does nothing: records are written by the Bridge's worker thread as they are
assembled.

**Names and directories.** ``name`` is the run name (``run.name``, else ``otel-bridge-<UTC timestamp>`` fixed when
the logger is created), ``version`` is ``""`` and ``save_dir`` is ``run.dir``, so Lightning's checkpoints go to
``<run dir>/checkpoints``. ``log_hyperparams`` writes ``<run dir>/hparams.json``.

**Multi-rank.** The logger acts on global rank 0 only (Lightning's ``rank_zero_only.rank``, set by the strategy):
only there does it create a Bridge and write records; on the other ranks its calls do nothing. To export the other
ranks' trainer instruments, build a Bridge on every rank with ``otel.prometheus`` / ``otel.otlp`` enabled and use
its ``meter()``: ranks other than ``delivery.rank`` write to no tracker (see :mod:`otel_bridge.integrations`).
"""

from __future__ import annotations

import logging
from argparse import Namespace
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from otel_bridge.bridge import Bridge
from otel_bridge.config import BridgeConfig
from otel_bridge.errors import BridgeClosedError, ConfigError, StepOrderError, install_hint
from otel_bridge.exporters.backends.base import Backend
from otel_bridge.exporters.delivery import DeliveryReport
from otel_bridge.integrations.hparams import save_hyperparameters
from otel_bridge.integrations.logged_values import LATE_VALUES, count_late_values, numeric_items
from otel_bridge.pipeline.run_dir import own_run_dir
from otel_bridge.ratelimit import RateLimitedLogger

try:
    from lightning.fabric.loggers.logger import _DummyExperiment
    from lightning.pytorch.loggers import Logger
    from lightning.pytorch.utilities import rank_zero_only
except ImportError as _err:  # pragma: no cover - exercised only without the extra
    raise ConfigError(
        f"otel_bridge.integrations.lightning needs lightning ({_err}); {install_hint('lightning')}"
    ) from _err

_log = logging.getLogger(__name__)

__all__ = ["OtelBridgeLogger"]


def _rank_zero() -> bool:
    """Whether this is global rank 0 as Lightning knows it (``rank_zero_only.rank``, set by the strategy)."""
    return int(getattr(rank_zero_only, "rank", 0)) == 0


class OtelBridgeLogger(Logger):  # type: ignore[misc, unused-ignore]  # Any when lightning is absent
    """Lightning metrics and the infrastructure's per-step statistics in one record per step (see the module).

    Args:
        bridge: a configuration (YAML path, dict, :class:`~otel_bridge.BridgeConfig`, or ``None`` for defaults plus
            ``OTEL_BRIDGE__...`` environment overrides), validated now, whose Bridge this logger creates and
            closes; or a :class:`~otel_bridge.Bridge` the caller owns.
        backends: extra backend objects for a Bridge this logger creates.

    Raises :class:`~otel_bridge.errors.ConfigError` for an invalid configuration.
    """

    def __init__(
        self,
        bridge: Bridge | str | Path | Mapping[str, Any] | BridgeConfig | None = None,
        *,
        backends: Sequence[Backend] = (),
    ) -> None:
        super().__init__()
        self._backends = tuple(backends)
        self._bridge: Bridge | None
        if isinstance(bridge, Bridge):
            if backends:
                raise ConfigError("OtelBridgeLogger: `backends` apply to a Bridge it creates, not to one passed in")
            self._bridge, self._owns = bridge, False
            self._config = bridge.config
            self._run_dir = bridge.run_dir
        else:
            config = BridgeConfig.load(bridge)
            # the run's own directory, chosen now (Lightning asks for it before the bridge starts) and pinned as
            # run.name, so the bridge started later writes into the same one
            run_dir = own_run_dir(config.run)
            run = config.run.model_copy(update={"name": run_dir.name})
            self._bridge, self._owns = None, True
            self._config = config.model_copy(update={"run": run})
            self._run_dir = run_dir
        self._warn = RateLimitedLogger(_log, self._config.delivery.warn_interval_s)
        self._last: int | None = None
        self._late = 0

    @property
    def late_values(self) -> int:
        """How many values were left out because Lightning logged them for a step whose record was already sent."""
        return self._late

    # -- Lightning's Logger properties ---------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The run name."""
        return self._run_dir.name

    @property
    def version(self) -> str:
        """Empty: one run directory per run (checkpoints go to ``<run dir>/checkpoints``)."""
        return ""

    @property
    def save_dir(self) -> str:
        """The parent of the run directory (``run.dir``)."""
        return str(self._run_dir.parent)

    @property
    def root_dir(self) -> str:
        """The run directory."""
        return str(self._run_dir)

    @property
    def log_dir(self) -> str:
        """The run directory."""
        return str(self._run_dir)

    @property
    def bridge(self) -> Bridge:
        """The Bridge (created on first use when this logger owns it; call it on the logging rank only)."""
        if self._bridge is None:
            self._bridge = Bridge.from_config(self._config, backends=self._backends)
        return self._bridge

    @property
    def experiment(self) -> Any:
        """Lightning's convention: the Bridge on global rank 0, a stand-in that accepts any call elsewhere."""
        return self.bridge if _rank_zero() else _DummyExperiment()

    # -- logging -------------------------------------------------------------------------------------------------

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Record ``metrics`` for ``step`` (the step after the last one when ``None``): the step's boundary on its first
        call, joining its open record afterwards; see the module for windows and for values of an earlier step. Does
        nothing on ranks other than global rank 0."""
        if not _rank_zero():
            return
        numbers, skipped = numeric_items(metrics)
        if skipped:
            _log.debug("otel-bridge: non-numeric metrics left out: %s", skipped)
        if step is None:
            step = 0 if self._last is None else self._last + 1
        bridge = self.bridge
        if self._last is not None and step < self._last:
            self._leave_out(bridge, numbers, step, f"step {self._last} was logged since")
            return
        try:
            bridge.log(numbers, step=step)
        except StepOrderError as err:
            self._leave_out(bridge, numbers, step, str(err))
        except BridgeClosedError as err:
            self._warn.warning(f"deliver:{type(err).__name__}", "otel-bridge: step %d is not recorded: %s", step, err)
        if self._last is None or step > self._last:
            self._last = step

    def _leave_out(self, bridge: Bridge, numbers: Mapping[str, Any], step: int, why: str) -> None:
        if not numbers:
            return
        self._late += len(numbers)
        count_late_values(bridge, len(numbers))
        self._warn.warning(
            "late",
            "otel-bridge: Lightning logged %s for step %d after its record was sent (%s); they are left out and "
            "counted in %s",
            sorted(numbers),
            step,
            why,
            LATE_VALUES,
        )

    def log_hyperparams(self, params: Mapping[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        """Merge ``params`` into ``<run dir>/hparams.json`` (on global rank 0)."""
        if _rank_zero():
            save_hyperparameters(self.bridge, params)

    def save(self) -> None:
        """Nothing to do: the Bridge writes each record as soon as it is assembled."""

    def finalize(self, status: str) -> None:
        """Send the open record; close the Bridge if this logger created it (delivering every pending record)."""
        if self._bridge is None or not _rank_zero():
            return
        if not self._owns:
            self._bridge.commit()
            return
        report: DeliveryReport = self._bridge.close()
        if not report.complete:
            _log.warning("otel-bridge: run %s ended (%s) with undelivered records: %s", self.name, status, report)
