"""MLflow backend: each record is logged with ``MlflowClient.log_batch`` as ``Metric(key, value, timestamp, step)``.

MLflow keeps a separate history per metric keyed by ``step``, so records can arrive late without losing
anything, and a run can be shared with the trainer. A record with more than :data:`MAX_METRICS_PER_BATCH`
keys is split into several batches; a retried record resumes after the batches already logged.

``mlflow`` is imported when a backend is created.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import posixpath
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, TextIO

from otel_bridge.errors import BackendError, ConfigError, install_hint, redact_url_credentials, redacted_cause
from otel_bridge.exporters.backends.options import BackendOptions, NonEmptyStr, StrMapping, parse_options
from otel_bridge.exporters.naming import MLFLOW_KEYS, MLFLOW_NAME
from otel_bridge.exporters.record import StepRecord

_log = logging.getLogger(__name__)

MAX_METRICS_PER_BATCH: Final = 1000
"""MLflow's limit on the metrics of one ``log_batch`` request."""

MAX_KEY_LENGTH: Final = 250
"""MLflow's limit on the length of a metric name."""


class MlflowOptions(BackendOptions):
    """Options of the ``mlflow`` tracker; ``experiment``, ``run_name`` and ``tags`` describe a run the bridge creates
    (ignored, with a WARNING, when it logs into an existing run)."""

    tracking_uri: NonEmptyStr | None = None
    """MLflow tracking URI (sqlite:///mlflow.db, http://host:5000); default $MLFLOW_TRACKING_URI or MLflow's."""
    experiment: NonEmptyStr | None = None
    """Experiment name (created if missing); default $MLFLOW_EXPERIMENT_NAME or MLflow's 'Default'."""
    run_name: NonEmptyStr | None = None
    """Default the bridge's run name."""
    run_id: NonEmptyStr | None = None
    """Log into this existing run instead of the active or a new one (never ended by the bridge)."""
    tags: StrMapping | None = None


_CREATE_ONLY_OPTIONS: Final = ("experiment", "run_name", "tags")


def mlflow_key_problem(key: str) -> str | None:
    """Why MLflow would reject ``key`` as a metric name, or ``None`` when it accepts it."""
    if not key:
        return "it is empty"
    if len(key) > MAX_KEY_LENGTH:
        return f"it is {len(key)} characters long (MLflow allows {MAX_KEY_LENGTH})"
    if not MLFLOW_NAME.match(key):
        return "it has characters other than letters, digits, '_', '-', '.', ' ', ':' and '/'"
    normalized = posixpath.normpath(key)
    if normalized != key or normalized == "." or normalized.startswith(("..", "/")):
        return f"MLflow treats names as paths and this one would resolve to {normalized!r}"
    return None


class MlflowBackend:
    """Logs records to the MLflow run ``run_id`` through ``client`` (an ``MlflowClient``).

    ``owns_run`` says whether the bridge created the run, and so ends it (status FINISHED) at :meth:`close`.
    """

    def __init__(
        self,
        client: Any,
        run_id: str,
        *,
        owns_run: bool,
        metric_type: Any,
        mlflow_error: type[BaseException],
    ) -> None:
        self.name = "mlflow"
        self.key_rule = MLFLOW_KEYS
        self.client = client
        self.run_id = run_id
        self.owns_run = owns_run
        self._metric_type = metric_type
        self._mlflow_error = mlflow_error
        self._resume: tuple[int, int] | None = None
        self._closed = False

    def _metrics(self, record: StepRecord) -> list[Any]:
        timestamp_ms = round(record.time * 1000)
        metrics = []
        for key in sorted(record.values):
            problem = mlflow_key_problem(key)
            if problem is not None:
                raise BackendError(
                    f"mlflow: step {record.step}: metric key {key!r} is not a valid MLflow metric name: {problem}; "
                    "name keys with otel_bridge.exporters.naming.MLFLOW_KEYS"
                )
            value = float(record.values[key])
            if not math.isfinite(value):
                raise BackendError(
                    f"mlflow: step {record.step}: metric {key!r} is {value}; "
                    "non-finite values must be filtered before they reach a backend"
                )
            metrics.append(self._metric_type(key=key, value=value, timestamp=timestamp_ms, step=record.step))
        return metrics

    def write(self, record: StepRecord) -> None:
        """Log the record's metrics in batches of at most :data:`MAX_METRICS_PER_BATCH`, synchronously."""
        if self._closed:
            raise BackendError(f"mlflow: the backend for run {self.run_id} is closed; cannot write step {record.step}")
        metrics = self._metrics(record)
        batches = [metrics[i : i + MAX_METRICS_PER_BATCH] for i in range(0, len(metrics), MAX_METRICS_PER_BATCH)]
        done = self._resume[1] if self._resume is not None and self._resume[0] == record.step else 0
        for index in range(done, len(batches)):
            try:
                self.client.log_batch(self.run_id, metrics=batches[index], synchronous=True)
            except (self._mlflow_error, OSError) as err:
                self._resume = (record.step, index)
                raise BackendError(
                    f"mlflow: cannot log step {record.step} (batch {index + 1} of {len(batches)}) to run "
                    f"{self.run_id}: {err}"
                ) from redacted_cause(err)
        self._resume = None

    def flush(self) -> None:
        """Nothing to do: every batch is logged synchronously by :meth:`write`."""

    def close(self) -> None:
        """End the run (FINISHED) if the bridge created it. Closing twice is allowed."""
        if self._closed:
            return
        self._closed = True
        if not self.owns_run:
            return
        try:
            # MLflow prints "View run ... at: <tracking URI>/#/..." to stdout when it ends a run on a tracking server,
            # user information included
            with contextlib.redirect_stdout(_RedactingStream(sys.stdout)):
                self.client.set_terminated(self.run_id, status="FINISHED")
        except (self._mlflow_error, OSError) as err:
            raise BackendError(f"mlflow: cannot end run {self.run_id}: {err}") from redacted_cause(err)


class _RedactingStream(io.TextIOBase):
    """Writes to ``stream`` with URL credentials replaced (:func:`redact_url_credentials`) in each write. Whatever
    another thread prints while it stands in for ``sys.stdout`` goes through it too, unchanged but for credentials."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._stream.write(redact_url_credentials(text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()


def create_mlflow_backend(options: Mapping[str, Any], run_dir: Path) -> MlflowBackend:
    """The ``mlflow`` tracker: log into ``run_id``, else into the active MLflow run, else into a new run.

    Options are :class:`MlflowOptions`; those that describe a new run are ignored (with a WARNING) when the bridge
    logs into an existing run.
    """
    parsed = parse_options("mlflow", MlflowOptions, options)
    tracking_uri, experiment, run_id, tags = parsed.tracking_uri, parsed.experiment, parsed.run_id, parsed.tags
    run_name = parsed.run_name or run_dir.name or None
    try:
        import mlflow
        from mlflow.entities import Metric
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient
    except ImportError as err:
        raise ConfigError(f"tracker 'mlflow' needs the extra: {install_hint('mlflow')}") from err

    def backend(client: Any, run: str, owns_run: bool) -> MlflowBackend:
        return MlflowBackend(client, run, owns_run=owns_run, metric_type=Metric, mlflow_error=MlflowException)

    ignored = [option for option in _CREATE_ONLY_OPTIONS if options.get(option) is not None]
    active = mlflow.active_run()
    if run_id is None and active is not None:
        current_uri = mlflow.get_tracking_uri()
        if tracking_uri is not None and tracking_uri != current_uri:
            raise ConfigError(
                f"tracker 'mlflow': an MLflow run ({active.info.run_id}) is active on {current_uri}, but the option "
                f"tracking_uri is {tracking_uri}; remove tracking_uri to log into the active run, or set run_id"
            )
        run_id = active.info.run_id
        _log.info("mlflow: logging into the active run %s on %s", run_id, redact_url_credentials(current_uri))
        tracking_uri = current_uri
    if run_id is not None:
        if ignored:
            _log.warning(
                "mlflow: logging into the existing run %s; the option(s) %s describe a run the bridge creates and "
                "are ignored",
                run_id,
                ", ".join(ignored),
            )
        client = MlflowClient(tracking_uri=tracking_uri)
        try:
            client.get_run(run_id)
        except MlflowException as err:
            raise BackendError(
                f"mlflow: cannot find run {run_id!r} at {client.tracking_uri}: {err}; check run_id and tracking_uri"
            ) from redacted_cause(err)
        return backend(client, run_id, owns_run=False)

    client = MlflowClient(tracking_uri=tracking_uri)
    experiment_name = experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or "Default"
    try:
        found = client.get_experiment_by_name(experiment_name)
        experiment_id = found.experiment_id if found is not None else client.create_experiment(experiment_name)
        run = client.create_run(
            experiment_id, run_name=run_name, tags={key: str(value) for key, value in (tags or {}).items()}
        )
    except (MlflowException, OSError) as err:
        raise BackendError(
            f"mlflow: cannot create a run in experiment {experiment_name!r} at {client.tracking_uri}: {err}; "
            "check tracking_uri and experiment"
        ) from redacted_cause(err)
    _log.info(
        "mlflow: created run %s in experiment %r at %s",
        run.info.run_id,
        experiment_name,
        redact_url_credentials(client.tracking_uri),
    )
    return backend(client, run.info.run_id, owns_run=True)
