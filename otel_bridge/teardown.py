"""Close-time teardown under a deadline: each part (the infrastructure sources, the MeterProvider's shutdown with its
OTLP push, the trainer's ``/metrics`` endpoint) runs on a thread of its own, in order; a part still running at the
deadline is left behind on its daemon thread and named, so ``Bridge.close()`` returns by ``close_timeout_s`` whatever
a collector or a source does."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

_log = logging.getLogger(__name__)

GRACE_S = 0.1  # each part gets at least this long, even when the deadline has passed


def run_within(parts: Sequence[tuple[str, Callable[[], None]]], deadline: float) -> tuple[str, ...]:
    """Run ``parts`` (``(what, function)``) one after the other until ``deadline`` (``time.monotonic()``); returns the
    names of the parts left running. A part that raises is logged with its traceback and the next one runs."""
    abandoned: list[str] = []
    for what, part in parts:

        def run(what: str = what, part: Callable[[], None] = part) -> None:
            try:
                part()
            except Exception:  # noqa: BLE001 - one part's failure must not stop the rest of the teardown
                _log.exception("otel-bridge: close(): %s failed", what)

        thread = threading.Thread(target=run, name="otel-bridge-close", daemon=True)
        thread.start()
        thread.join(max(GRACE_S, deadline - time.monotonic()))
        if thread.is_alive():
            abandoned.append(what)
            _log.error("otel-bridge: close() left %s running past its deadline (delivery.close_timeout_s)", what)
    return tuple(abandoned)
