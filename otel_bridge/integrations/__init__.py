"""Thin adapters that put a training framework's metrics and step boundaries into a :class:`~otel_bridge.Bridge`.

Each adapter lives in its own module and imports its framework only there, so ``import otel_bridge`` (and this
package) never pulls in torch, transformers or lightning:

- :mod:`otel_bridge.integrations.verl`: ``Tracking``, a drop-in for verl's ``verl.utils.tracking.Tracking``
  (same constructor, ``log(data, step)``, backend names), plus :func:`~otel_bridge.integrations.verl.patch_verl`.
- :mod:`otel_bridge.integrations.huggingface`: ``OtelBridgeCallback``, a ``transformers.TrainerCallback``
  (the ``huggingface`` extra).
- :mod:`otel_bridge.integrations.lightning`: ``OtelBridgeLogger``, a ``lightning.pytorch.loggers.Logger``
  (the ``lightning`` extra).

**Windows and records.** Where the framework has hooks at the start and end of a step (Hugging Face's
``on_step_begin`` / ``on_step_end``), the adapter marks the window with :meth:`Bridge.begin_step
<otel_bridge.Bridge.begin_step>` / :meth:`Bridge.end_step <otel_bridge.Bridge.end_step>`: the window is the step
itself. Where it only hands over metrics (verl's ``log(data, step)``, a Lightning ``Logger``), the first
:meth:`Bridge.log <otel_bridge.Bridge.log>` for a step is its boundary: the window runs from the previous boundary to
that call, and the first such record of a run has no window start (gauges only; see the README). Either way a step's
record stays open after its window ends: values the framework logs later *for the same step* (evaluation, epoch
metrics, the closing summary) join it, until the next step begins or the run ends. Values for a step whose record was
already sent cannot join it: the adapters leave them out with a rate-limited WARNING and count them in the
``otel_bridge/late_values`` health key (:data:`LATE_VALUES`) of the following records, so nothing disappears silently.

Multi-rank runs: only the process whose rank is ``delivery.rank`` (rank from ``otel.rank``, else ``$RANK``, else 0)
writes records to the trackers and queries the infrastructure. On the other ranks a Bridge keeps no trackers and no
producers; the adapters skip their calls there (each module says how it knows the rank). The trainer's OpenTelemetry
instruments of every rank can still be exported with ``otel.prometheus`` (a ``/metrics`` endpoint per rank, which
Prometheus scrapes and aggregates) or ``otel.otlp`` (pushed to an OpenTelemetry Collector), with the resource
attribute ``otel_bridge.rank`` telling the ranks apart.

What the adapters share is in two modules of its own, and on this package's face: :mod:`~.hparams`
(:func:`save_hyperparameters`: ``<run dir>/hparams.json``) and :mod:`~.logged_values` (:func:`numeric_items`: a
framework's log dict reduced to its numbers; :func:`count_late_values`).
"""

from otel_bridge.integrations.hparams import HPARAMS_FILE, plain, save_hyperparameters
from otel_bridge.integrations.logged_values import LATE_VALUES, count_late_values, numeric_items

__all__ = ["HPARAMS_FILE", "LATE_VALUES", "count_late_values", "numeric_items", "plain", "save_hyperparameters"]
