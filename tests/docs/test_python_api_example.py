"""Issue 36: docs/python-api.md's whole-loop example runs as written, and its record holds what the page says: the
steps, the trainer's values, the phases and the OpenTelemetry instrument."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.cli.support import REPO, cli_env

PAGE = REPO / "docs" / "python-api.md"


def example() -> str:
    found = re.search(r"<!-- python-api:example -->\n```python\n(.*?)\n```", PAGE.read_text(encoding="utf-8"), re.S)
    assert found, f"no block marked python-api:example in {PAGE}"
    return found[1]


def test_the_python_api_example_runs_and_records_what_it_says(tmp_path: Path) -> None:
    (tmp_path / "loop.py").write_text(example() + "\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "loop.py"], cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "DeliveryReport(" in done.stdout
    loss, tokens, gen = done.stdout.splitlines()[0].split()
    assert (float(loss), float(tokens)) == (1.0 / 3, 3 * 512.0)
    assert float(gen) >= 0.2
    records = [json.loads(line) for line in (tmp_path / "runs" / "my-loop" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2]
    for record in records:
        assert record["actor/loss"] == 1.0 / (record["step"] + 1)
        assert record["trainer/tokens"] == 512.0 * (record["step"] + 1)  # a counter is a running total
        assert record["phase/gen/seconds"] >= 0.2
        assert record["phase/update/seconds"] >= 0.1
