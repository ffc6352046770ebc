"""``run_cli``'s forked command line (:mod:`tests.cli.cli_forks`) answers as a new ``python -m otel_bridge.cli``
process does: output, exit status, the environment and directory it reads its configuration from."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.support import run_cli, write_config

CASES = {
    "version": (["--version"], {}),
    "argument error": (["plot"], {}),
    "config from the environment": (["discover"], {"OTEL_BRIDGE_CONFIG": "elsewhere.yaml"}),
    "config from the directory": (["prometheus-rules", "rules.yml"], {}),
    "a command's error": (["plot", "missing", "-o", "x.png"], {"NO_COLOR": "0"}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_forked_command_answers_as_a_new_process(tmp_path: Path, case: str) -> None:
    args, env = CASES[case]
    answers = []
    for fresh in (True, False):
        cwd = tmp_path / ("fresh" if fresh else "forked")
        cwd.mkdir()
        write_config(cwd / "otel-bridge.yaml", {"metrics": [{"name": "vllm:x", "type": "counter"}]})
        write_config(cwd / "elsewhere.yaml", {"metrics": [{"name": "vllm:y", "type": "gauge"}]})
        done = run_cli(args, cwd=cwd, env=env, fresh=fresh)
        files = sorted(p.name for p in cwd.iterdir())
        answers.append(
            (done.returncode, done.stdout.replace(str(cwd), "CWD"), done.stderr.replace(str(cwd), "CWD"), files)
        )
    assert answers[1] == answers[0]
