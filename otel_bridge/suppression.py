"""Keep the bridge's own network I/O out of the user's telemetry.

With ``opentelemetry-instrumentation-requests`` (or ``-urllib3``) active in the trainer, every Prometheus query,
``/metrics`` scrape and tracker upload the bridge makes would otherwise become a span and an ``http.client.*``
measurement of the user's. OpenTelemetry's convention for an exporter's own I/O is the context key
``_SUPPRESS_INSTRUMENTATION_KEY`` (the SDK's ``PeriodicExportingMetricReader`` sets it around each export), honoured by
every instrumentation built on ``opentelemetry-instrumentation``. A context is per thread: each thread of the bridge
that does I/O sets it itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import ParamSpec, TypeVar

from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, detach, set_value

_P = ParamSpec("_P")
_R = TypeVar("_R")

__all__ = ["instrumentation_suppressed", "suppress_in_this_thread", "suppressing"]


@contextmanager
def instrumentation_suppressed() -> Iterator[None]:
    """Within the block, instrumentations on this thread record nothing."""
    token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
    try:
        yield
    finally:
        detach(token)


def suppress_in_this_thread() -> None:
    """From now on, for the rest of this thread's life (a ``ThreadPoolExecutor`` ``initializer`` of the bridge's own
    pools)."""
    attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))


def suppressing(target: Callable[_P, _R]) -> Callable[_P, _R]:
    """``target`` (a thread's ``run`` function) with instrumentation suppressed while it runs."""

    @wraps(target)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with instrumentation_suppressed():
            return target(*args, **kwargs)

    return run
