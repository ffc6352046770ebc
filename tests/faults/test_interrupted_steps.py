"""A step that did not end normally is still delivered, and says so (issue 14 point 4).

``close()`` (and the ``atexit`` hook) end a step ``begin_step`` left open; an exception leaving ``with bridge.step(n)``
ends the step where it was. Either way the record reaches every tracker with what was logged, noted as interrupted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from otel_bridge import Bridge
from otel_bridge.exporters.tracker import INTERRUPTED_NOTE
from tests.faults.support import base_config
from tests.helpers.backends import BackendDouble


def _jsonl(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_close_delivers_a_step_begin_step_left_open(tmp_path: Path) -> None:
    backend = BackendDouble()
    bridge = Bridge.from_config(base_config(tmp_path, "open"), backends=[backend])
    bridge.log({"actor/loss": 1.0}, step=0)
    bridge.begin_step(1)  # the Hugging Face pattern: on_step_begin ran, on_step_end never will
    bridge.log({"actor/loss": 0.5}, step=1)
    report = bridge.close()
    assert report.complete
    assert [r.step for r in backend.records] == [0, 1]
    last = backend.records[-1]
    assert last.values["actor/loss"] == 0.5
    assert INTERRUPTED_NOTE in last.notes
    assert INTERRUPTED_NOTE not in backend.records[0].notes
    lines = _jsonl(tmp_path / "open" / "metrics.jsonl")
    assert [line["step"] for line in lines] == [0, 1]
    assert lines[1]["_notes"] == [INTERRUPTED_NOTE]


def test_an_exception_inside_a_step_delivers_it_marked_interrupted(tmp_path: Path) -> None:
    backend = BackendDouble()
    bridge = Bridge.from_config(base_config(tmp_path, "raised"), backends=[backend])
    with bridge.step(0):
        bridge.log({"actor/loss": 1.0}, step=0)
    try:
        with bridge.step(1):
            bridge.log({"actor/loss": 0.5}, step=1)
            raise RuntimeError("CUDA out of memory")
    except RuntimeError:
        pass
    report = bridge.close()
    assert report.complete
    assert backend.by_step()[1]["actor/loss"] == 0.5
    assert INTERRUPTED_NOTE in backend.records[1].notes
    assert INTERRUPTED_NOTE not in backend.records[0].notes


def test_exit_with_a_step_open_delivers_it_marked_interrupted(tmp_path: Path) -> None:
    """A real process that ends with a step open (no close()): the atexit hook delivers it, marked."""
    script = textwrap.dedent(
        """
        import sys
        from otel_bridge import Bridge
        bridge = Bridge.from_config({"run": {"name": "exit", "dir": sys.argv[1]}})
        bridge.log({"actor/loss": 1.0}, step=0)
        bridge.begin_step(1)
        bridge.log({"actor/loss": 0.5}, step=1)
        """
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True, timeout=60)
    lines = _jsonl(tmp_path / "exit" / "metrics.jsonl")
    assert [line["step"] for line in lines] == [0, 1]
    assert lines[1]["actor/loss"] == 0.5
    assert lines[1]["_notes"] == [INTERRUPTED_NOTE]
