"""The facade: builds the pipeline from config and marks training steps and their phases; :func:`install` makes its
MeterProvider the global one.

::

    bridge = Bridge.from_config("otel-bridge.yaml")
    tokens = bridge.meter("trainer").create_counter("trainer.tokens")
    for step in range(num_steps):
        with bridge.step(step):
            metrics = train_one_step()          # rollouts on vLLM, updates, ...
            tokens.add(metrics["tokens"])
            bridge.log(metrics, step=step)       # verl-style dict, same record
    bridge.close()

``with bridge.step(n)`` marks the window ``(enter, exit]``; ``bridge.log(metrics, step)`` outside a ``step()`` block
marks the window ``(previous boundary, now]`` itself. Either way the boundary only snapshots in-memory instruments and
enqueues the step: queries, scrapes and tracker writes run on a worker thread, and records reach every
tracker in step order.

``with bridge.phase("gen")`` marks a phase of the step the same way and costs less: a timestamp, the producers'
non-blocking ``on_boundary(t)`` (the scrape producer scrapes on its sampler thread, the PromQL producer notes the time)
and a list append. The phases' windows are produced on the delivery worker with the step's
(:mod:`otel_bridge.pipeline.phases`).

SIGTERM handling is opt-in (:meth:`Bridge.handle_sigterm`): a library must not take over a process' signals by
default (verl, Ray, torchrun and Lightning install their own), so nothing here changes them unless asked for:
``run.handle_sigterm: true``, :meth:`Bridge.handle_sigterm`, or :func:`install`.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import signal
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from opentelemetry.metrics import Meter
from opentelemetry.sdk.metrics import MeterProvider

from otel_bridge.config import BridgeConfig
from otel_bridge.discovery import RolloutServers
from otel_bridge.errors import BridgeClosedError, ConfigError, StepOrderError, TrainingThreadError
from otel_bridge.exporters.backends.base import Backend
from otel_bridge.exporters.delivery import DeliveryReport
from otel_bridge.exporters.record import StepRecord
from otel_bridge.exporters.tracker import TrackerExporter
from otel_bridge.health import Health
from otel_bridge.pipeline.build import build_producers, create_backends, process_rank
from otel_bridge.pipeline.infra_deadline import InfraDeadline, start_sources
from otel_bridge.pipeline.meter_provider import (
    attach_readers,
    build_extra_readers,
    build_resource,
    check_meter_provider,
)
from otel_bridge.pipeline.phases import PhaseLog
from otel_bridge.pipeline.reader import StepMetricReader
from otel_bridge.pipeline.record_store import RecordStore
from otel_bridge.pipeline.run_dir import default_run_name, own_run_dir
from otel_bridge.pipeline.step_job import StepJob
from otel_bridge.pipeline.tracing import build_step_tracer
from otel_bridge.pipeline.trainer_values import check_keys, check_step, trainer_numbers
from otel_bridge.pipeline.worker import DeliveryWorker, StepQueue, ranges, run_within
from otel_bridge.producers.base import MetricProducer, ProducerLifecycle
from otel_bridge.ratelimit import RateLimitedLogger
from otel_bridge.suppression import instrumentation_suppressed
from otel_bridge.window import StepWindow

_log = logging.getLogger(__name__)


class Bridge:
    """Infrastructure and trainer metrics into trackers, one record per training step.

    Build it with :meth:`from_config`. Threads: ``step``/``log``/``phase``/``commit`` belong to one training thread,
    the first to call one of them; another thread's call raises :class:`~otel_bridge.errors.TrainingThreadError` while
    that thread is alive (once it has ended, the next thread to call takes over). ``collect`` of a delivered step,
    ``record`` and ``close`` work from any thread.
    """

    def __init__(
        self,
        config: BridgeConfig,
        *,
        producers: list[MetricProducer] | None = None,
        backends: Sequence[Backend] = (),
        rollout_servers: RolloutServers | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        self.config = config
        self.health = Health()
        self._warn = RateLimitedLogger(_log, config.delivery.warn_interval_s)
        self._trainer: threading.Thread | None = None  # the training thread (see _check_thread)
        self._trainer_lock = threading.Lock()
        delivery = config.delivery
        self.rank = process_rank(config)
        self.delivers = self.rank == delivery.rank
        # the delivering rank writes into a directory of its own (a re-run never appends to an earlier run's files)
        self.run_dir = (
            own_run_dir(config.run) if self.delivers else config.run.dir / (config.run.name or default_run_name())
        )
        self._records = RecordStore()
        check_meter_provider(meter_provider)
        try:
            # Everything that can fail at start-up runs before the trackers are created, so a failed start leaves no
            # empty wandb/MLflow run and no empty run directory behind.
            if not self.delivers:
                self._producers = []
                _log.info("otel-bridge: rank %d does not deliver (delivery.rank is %d)", self.rank, delivery.rank)
            elif producers is not None:
                self._producers = producers
            else:
                with instrumentation_suppressed():  # start-up queries and scrapes are the bridge's own I/O too
                    self._producers = build_producers(config, self.health, rollout_servers)
            self._infra = InfraDeadline(delivery.produce_timeout_s)
            start_sources(  # startup: degrade gives the checks at most the sources' timeout_s
                self._infra,
                [p.start for p in self._producers if isinstance(p, ProducerLifecycle)],
                degrade=config.startup == "degrade",
                timeout_s=_startup_timeout(config),
            )
            resource = build_resource(config.otel, self.run_dir.name)
            self._extra = build_extra_readers(config.otel)
            prefix = config.naming.infra_prefix
            self._tracer = build_step_tracer(
                config.otel, resource, run=self.run_dir.name, rank=self.rank, infra_prefix=prefix
            )
            created = create_backends(config, self.run_dir) if self.delivers else []
            self.exporter = TrackerExporter(
                [*created, *backends] if self.delivers else [],
                infra_prefix=prefix,
                health=self.health,
                warn_interval_s=delivery.warn_interval_s,
                retries=delivery.backend_retries,
                backoff_s=delivery.backend_backoff_s,
                backend_queue_size=delivery.backend_queue_size,
            )
            self.reader = StepMetricReader(
                self.exporter,
                self._producers,
                health=self.health,
                resource=resource,
                warn_interval_s=config.delivery.warn_interval_s,
                infra_deadline=self._infra if self._producers else None,
                collect_every=config.otel.collect_every,
            )
            self._provider = attach_readers([self.reader, *self._extra.readers], resource, self.health, meter_provider)
            self.meter_provider = self._provider.provider
        except BaseException:
            self._close_producers()
            if hasattr(self, "_provider"):
                self._provider.shutdown()
            if hasattr(self, "_extra"):
                self._extra.close()
            if (tracer := getattr(self, "_tracer", None)) is not None:
                tracer.close(0)
            if hasattr(self, "exporter"):
                self.exporter.shutdown()
            raise
        self._jobs = StepQueue(
            delivery.queue_size,
            delivery.max_block_s,
            health=self.health,
            warn=self._warn,
            on_full=self.reader.abandon_infra,
        )
        self._worker = DeliveryWorker(self._jobs, self.reader, self._records, self._tracer)
        self._open_step: int | None = None
        self._open_start = 0.0
        self._open_values: dict[str, float] = {}
        self._phase_log = PhaseLog(config.naming.phase_repeats)
        self._pending: StepJob | None = None
        self._last_step: int | None = None
        self._last_boundary: float | None = None
        self._closed = False
        self._report: DeliveryReport | None = None
        atexit.register(self._close_at_exit)
        self.reader.on_shutdown = self._close_on_shutdown
        if config.run.handle_sigterm:
            self.handle_sigterm()
        producer_count = len(self._producers)
        _log.info("otel-bridge: run %s, %d producer(s), trackers %s", self.run_dir, producer_count, self.backend_names)

    @classmethod
    def from_config(
        cls,
        config: str | Path | Mapping[str, Any] | BridgeConfig | None = None,
        *,
        backends: Sequence[Backend] = (),
        rollout_servers: RolloutServers | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> Bridge:
        """Build a bridge from a YAML path, a dict, a :class:`BridgeConfig` or nothing (defaults + env overrides).

        ``backends`` adds backend objects of your own (anything with ``name``, ``write``, ``flush``, ``close``) to the
        configured trackers. ``rollout_servers`` registers rollout servers beside ``scrape.targets``: a list of
        ``host:port``, a callable returning one, or Ray actor handles with a ``metrics_address()`` method.
        ``meter_provider``: your SDK MeterProvider, to take the bridge's readers (README: Using your own MeterProvider).

        Raises :class:`~otel_bridge.errors.ConfigError` (or a Prometheus/scrape error) at once when the configuration
        cannot work: nothing is left running in that case.
        """
        return cls(
            BridgeConfig.load(config), backends=backends, rollout_servers=rollout_servers, meter_provider=meter_provider
        )

    @property
    def backend_names(self) -> list[str]:
        """Names of the tracker backends records are written to."""
        return [b.name for b in self.exporter.backends]

    @property
    def metrics_url(self) -> str | None:
        """Where the trainer's instruments are served for Prometheus (``otel.prometheus.enabled``), else ``None``."""
        return self._extra.metrics_url

    @property
    def backends(self) -> list[Backend]:
        """The tracker backends."""
        return self.exporter.backends

    def meter(self, name: str, version: str | None = None) -> Meter:
        """An OpenTelemetry meter whose instruments land in the same per-step record."""
        return self.meter_provider.get_meter(name, version)

    # -- step boundaries -------------------------------------------------------------------------------------------

    def _check_open(self, call: str) -> None:
        if self._closed:
            raise BridgeClosedError("this Bridge is closed; create a new one with Bridge.from_config(...)")
        self._check_thread(call)

    def _check_thread(self, call: str) -> None:
        """Refuse ``call`` from a thread other than the training thread while that one is alive (see the class)."""
        current = threading.current_thread()
        if self._trainer is current:
            return
        with self._trainer_lock:
            if self._trainer is None or not self._trainer.is_alive():
                self._trainer = current
                return
            raise TrainingThreadError(
                f"bridge.{call}() from thread {current.name!r}, but this Bridge's steps come from thread "
                f"{self._trainer.name!r} (its first step/log/phase call), which is still running: one Bridge records "
                "one training loop's steps. Call step/log/phase from that thread, or give this loop its own Bridge"
            )

    def _check_new_step(self, step: int) -> None:
        if self._last_step is not None and step <= self._last_step:
            raise StepOrderError(
                f"step {step} comes after step {self._last_step} was already recorded: steps must increase "
                "(one record per step, in order)"
            )

    def _boundary(self, t: float) -> None:
        for producer in self._producers:
            if isinstance(producer, ProducerLifecycle):
                producer.on_boundary(t)

    @contextmanager
    def step(self, step: int) -> Iterator[None]:
        """Mark training step ``step``: its window is the time spent inside the ``with`` block.

        ``bridge.log(metrics, step=step)`` inside the block, or after it until the next step begins, adds the
        trainer's dict to the same record. Same as :meth:`begin_step` + :meth:`end_step`.
        """
        self.begin_step(step)
        try:
            yield
        except BaseException:  # an exception or SIGTERM's SystemExit: the step ends here and is marked interrupted
            self._end_step(step, interrupted=True)
            raise
        self.end_step(step)

    def begin_step(self, step: int) -> None:
        """Start the window of training step ``step`` now (for callbacks that cannot wrap a ``with`` block)."""
        self._check_open("begin_step")
        step = check_step(step, "begin_step")
        if self._open_step is not None:
            raise StepOrderError(f"step {step} opened while step {self._open_step} is still open; steps do not nest")
        self._check_new_step(step)
        self._commit()
        start = time.time()
        self._boundary(start)
        self._open_step, self._open_start, self._open_values = step, start, {}
        self._last_step = step

    def end_step(self, step: int) -> None:
        """End the window of step ``step`` now. Its record stays open for ``log(..., step=step)`` until the next step
        begins, :meth:`commit`, :meth:`collect` of that step, or :meth:`close`."""
        self._check_thread("end_step")
        self._end_step(step)

    def _end_step(self, step: int, *, interrupted: bool = False) -> None:
        if self._open_step != step:
            raise StepOrderError(f"end_step({step}) without begin_step({step}) (open step: {self._open_step})")
        end = time.time()
        self._boundary(end)
        window = StepWindow(step, self._open_start, end, interrupted=interrupted)
        self._pending = StepJob(
            window, self.reader.snapshot_instruments(), self._open_values, phases=self._phase_log.take(end)
        )
        self._open_step, self._open_values = None, {}
        self._last_boundary = end

    def commit(self) -> None:
        """Send the record of the last ended step now (no more values can be added to it). Sent as final: when its
        boundary skipped collecting the instruments (``otel.collect_every``), they are collected now, so a run whose
        last record went out this way loses no observation."""
        self._check_thread("commit")
        pending = self._pending
        if pending is not None and not pending.queued and not self.exporter.forked:
            pending.instruments = self.reader.final_instruments(pending.instruments)
        self._commit()

    def _commit(self) -> None:
        # The job leaves _pending only once it is queued: a signal's exception at any point in between leaves it
        # either still pending (close() queues it) or queued (marked so, never queued twice).
        pending = self._pending
        if self.exporter.forked:  # a forked child's copy has no delivery worker and the trackers are the parent's
            self._pending = None
            return
        try:
            if pending is not None and not pending.queued:
                self._jobs.put(pending)
        finally:
            if pending is not None and pending.queued:
                self._pending = None

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Record the trainer's metrics for ``step`` (verl's ``Tracking.log(data, step)`` shape).

        While step ``step`` is open (inside ``with bridge.step(step)``) or its record is still open (the step ended
        and no later step began), the values join its record. Otherwise this call is the step's boundary: its window
        runs from the previous boundary to now (the first one has no start; see the README), and the record stays
        open for more values of the same step until the next boundary, :meth:`commit`, :meth:`collect` or
        :meth:`close`. ``step`` is an integer (else :class:`~otel_bridge.errors.InvalidStepError`); a key in the
        bridge's ``otel_bridge/`` namespace raises :class:`~otel_bridge.errors.ReservedKeyError`. A value that is not
        one number (ints, floats, numpy/torch scalars) is skipped with a warning naming its key.
        """
        self._check_open("log")
        step = check_step(step, "log")
        check_keys(metrics)
        values = trainer_numbers(metrics, step, self._warn, self.health)
        if self._open_step is not None:
            if step != self._open_step:
                raise StepOrderError(
                    f"log(step={step}) inside `with bridge.step({self._open_step})`: use the same step"
                )
            self._open_values.update(values)
            return
        if self._pending is not None and self._pending.window.step == step:
            self._pending.values.update(values)
            return
        self._check_new_step(step)
        self._commit()
        end = time.time()
        self._boundary(end)
        window = StepWindow(step, self._last_boundary, end)
        self._pending = StepJob(window, self.reader.snapshot_instruments(), values, phases=self._phase_log.take(end))
        self._last_step, self._last_boundary = step, end

    # -- phase boundaries --------------------------------------------------------------------------------------------

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Mark phase ``name`` of the current step (``gen``, ``update_actor``...): its window is the ``with`` block.

        The step's record gets ``phase/<name>/seconds`` and every configured infrastructure statistic computed over
        the phase's window, as ``phase/<name>/<key>`` (README: Phases and traces). Phases do not nest; a name used
        several times in one step has one set of keys over all its occurrences (``naming.phase_repeats: sum``), or a
        set per occurrence, ``<name>_2`` for the second (``each``). Same as :meth:`begin_phase` + :meth:`end_phase`.
        """
        self.begin_phase(name)
        try:
            yield
        finally:
            self.end_phase(name)

    def begin_phase(self, name: str) -> None:
        """Start phase ``name`` now (for callbacks that cannot wrap a ``with`` block).

        Raises :class:`~otel_bridge.errors.StepOrderError` while another phase is open.
        """
        self._check_open("begin_phase")
        t = time.time()
        self._phase_log.begin(name, t)
        self._boundary(t)

    def end_phase(self, name: str) -> None:
        """End phase ``name`` now. A phase still open at a step boundary ends there (with a warning); ending it
        afterwards does nothing."""
        self._check_thread("end_phase")
        t = time.time()
        if self._phase_log.end(name, t):
            self._boundary(t)

    @property
    def current_phase(self) -> str | None:
        """The phase open now, or ``None``."""
        return self._phase_log.open_name

    # -- delivery ----------------------------------------------------------------------------------------------------

    def collect(self, step: int, timeout_s: float = 60.0) -> dict[str, float]:
        """The record delivered for ``step`` as ``{key: value}``, waiting for its delivery (up to ``timeout_s``)."""
        if self._pending is not None and self._pending.window.step == step:
            self.commit()
        return dict(self._records.wait(step, timeout_s).values)

    def record(self, step: int) -> StepRecord | None:
        """The full record delivered for ``step`` (one of the last 1000), or ``None``."""
        return self._records.get(step)

    def handle_sigterm(self) -> bool:
        """Make SIGTERM raise ``SystemExit(143)`` so that ``finally`` blocks and the ``atexit`` close run and the
        records of finished steps are delivered before the process exits.

        Opt-in (``run.handle_sigterm: true`` does it at construction; :func:`install` does it by default): a library
        must not take over a process' signals unasked. Only on the main thread and only while SIGTERM has its default
        action; a handler installed by the trainer or its framework is never replaced. Returns whether the handler
        is in place.
        """
        return _exit_on_sigterm()

    def close(self, timeout_s: float | None = None) -> DeliveryReport:
        """Deliver every pending step (up to ``timeout_s``, default ``delivery.close_timeout_s``), then shut down.

        A step still open (``begin_step`` without ``end_step``) ends now and is delivered, marked interrupted.

        Returns what was delivered; anything that was not is also logged at ERROR. Closing twice returns the same
        report.
        """
        if self._closed:
            assert self._report is not None
            return self._report
        if self.exporter.forked:  # a forked child's copy: the trackers, worker and run are the parent's
            return DeliveryReport((), ())
        if self._open_step is not None:  # left open by begin_step: it ends now and is delivered, marked interrupted
            self._end_step(self._open_step, interrupted=True)
        # the run's last window: sources that sample on their own schedule close it
        if self._pending is not None and not self._pending.queued:
            self._pending.window = dataclasses.replace(self._pending.window, final=True)
            self._pending.instruments = self.reader.final_instruments(self._pending.instruments)
        self._commit()
        self._closed = True
        atexit.unregister(self._close_at_exit)
        timeout = self.config.delivery.close_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        self._jobs.close()
        # Half the time for complete records; then the infrastructure readings still missing are given up so that
        # the trainer's values of every pending step are delivered within the deadline.
        self._worker.join(max(0.0, deadline - timeout / 2 - time.monotonic()))
        if self._worker.is_alive():
            self._jobs.drop_infra()
            self.reader.abandon_infra()
            self._worker.join(max(0.0, deadline - time.monotonic()))
        unassembled = self._jobs.drain_pending() if self._worker.is_alive() else []
        if self._worker.is_alive():
            _log.error(
                "otel-bridge: close() timed out after %.0fs assembling steps; never delivered: %s",
                timeout,
                ranges(unassembled) or "the step being assembled",
            )
        abandoned = run_within([("the infrastructure sources' close", self._close_producers)], deadline)
        self.exporter.shutdown(timeout_millis=max(0.0, deadline - time.monotonic()) * 1000)
        teardown = [("the trainer's /metrics endpoint", self._extra.close)]
        if not self.reader.is_shutdown:  # else the MeterProvider's shutdown() is what closes this bridge
            pushes = " (otel.otlp's final export)" if self.config.otel.otlp.enabled else ""
            teardown.insert(0, (f"the MeterProvider's shutdown{pushes}", self._provider.shutdown))
        if (tracer := self._tracer) is not None:
            teardown.append(("the traces' final export (otel.otlp)", lambda: tracer.close(deadline - time.monotonic())))
        abandoned += run_within(teardown, deadline)
        self._report = DeliveryReport(tuple(self.exporter.delivery_status()), tuple(unassembled), abandoned)
        return self._report

    def _close_on_shutdown(self, timeout_s: float) -> None:
        """The MeterProvider holding the bridge's reader is shut down: deliver what is pending and close."""
        if not self._closed:
            self.close(timeout_s)

    def _close_at_exit(self) -> None:
        """``atexit`` hook: deliver what is pending when the trainer exits without calling :meth:`close`.

        A forked child (a DataLoader worker exiting) inherits the hook: there it does nothing.
        """
        if self.exporter.forked:
            return
        report = self.close()
        if not report.complete:
            _log.error("otel-bridge: at exit, not every record was delivered: %s", report)

    def _close_producers(self) -> None:
        for producer in getattr(self, "_producers", []):
            if isinstance(producer, ProducerLifecycle):
                producer.close()

    def __enter__(self) -> Bridge:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Bridge(run_dir={str(self.run_dir)!r}, trackers={self.backend_names}, closed={self._closed})"


def _startup_timeout(config: BridgeConfig) -> float:
    """The infrastructure source's ``timeout_s``: the longest a ``startup: degrade`` start waits for its checks."""
    return config.prometheus.timeout_s if config.resolved_source() == "promql" else config.scrape.timeout_s


def install(
    config: str | Path | Mapping[str, Any] | BridgeConfig | None = None, *, handle_sigterm: bool = True
) -> Bridge:
    """Build a :class:`Bridge` and make its MeterProvider the global OpenTelemetry one.

    After this, ``opentelemetry.metrics.get_meter(...)`` anywhere in the trainer creates instruments that land in the
    per-step record (and, as configured under ``otel``, on a Prometheus ``/metrics`` endpoint and an OTLP collector)::

        bridge = otel_bridge.install("otel-bridge.yaml")

    Unless ``handle_sigterm=False``, SIGTERM then raises ``SystemExit(143)`` so the records of finished steps are
    delivered before exit (:meth:`Bridge.handle_sigterm`). Raises :class:`~otel_bridge.errors.ConfigError` when
    another global MeterProvider is already installed (OTel allows setting it once per process).
    """
    from opentelemetry import metrics

    if _global_provider_is_set():  # refuse before anything starts: no tracker run, no OTel override warning
        raise _already_set()
    bridge = Bridge.from_config(config)
    metrics.set_meter_provider(bridge.meter_provider)
    if metrics.get_meter_provider() is not bridge.meter_provider:  # another thread set one meanwhile
        bridge.close()
        raise _already_set()
    if handle_sigterm:
        bridge.handle_sigterm()
    return bridge


def _global_provider_is_set() -> bool:
    """Whether a global MeterProvider is set (or named by ``OTEL_PYTHON_METER_PROVIDER``, which loads it now).

    OpenTelemetry has no public way to ask: until one is set, ``get_meter_provider()`` returns its proxy provider.
    When that class cannot be found (another API version), the check after ``set_meter_provider`` still refuses.
    """
    from opentelemetry import metrics

    try:
        from opentelemetry.metrics._internal import _ProxyMeterProvider
    except ImportError:  # pragma: no cover - depends on the installed opentelemetry-api
        return False
    return not isinstance(metrics.get_meter_provider(), _ProxyMeterProvider)


def _already_set() -> ConfigError:
    return ConfigError(
        "a global OpenTelemetry MeterProvider is already set in this process (OTel allows one): call "
        "otel_bridge.install() before anything else sets it, or add the bridge to that provider: "
        "Bridge.from_config(config, meter_provider=opentelemetry.metrics.get_meter_provider())"
    )


def _raise_system_exit(signum: int, frame: object) -> None:
    """The SIGTERM handler: exit through ``SystemExit(128 + signum)`` so cleanup runs."""
    raise SystemExit(128 + signum)


def _exit_on_sigterm() -> bool:
    """Make SIGTERM raise ``SystemExit(143)`` when that is safe; ``True`` when the handler is (now) in place.

    Only on the main thread and only when SIGTERM still has its default action: a handler the trainer (or its
    framework) installed is never replaced. With the default action the process would die without running the
    ``atexit`` hook that delivers the records of finished steps.
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    current = signal.getsignal(signal.SIGTERM)
    if current is _raise_system_exit:
        return True
    if current is not signal.SIG_DFL:
        _log.info("otel-bridge: SIGTERM already has a handler (%r); it is left in place", current)
        return False
    signal.signal(signal.SIGTERM, _raise_system_exit)
    _log.debug("otel-bridge: SIGTERM now raises SystemExit so pending records are delivered before exit")
    return True
