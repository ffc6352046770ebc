"""``run_cli``'s forked command line (:mod:`tests.cli.cli_forks`) answers as a new ``python -m otel_bridge.cli``
process does: output, exit status, the environment and directory it reads its configuration from; ``run_python``'s
forked script as a new ``python -c`` process does."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli import support
from tests.cli.support import run_cli, run_python, write_config

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


SCRIPT = """
import json, os, sys, threading
open("written", "w").write("x")
print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "cwd": os.path.basename(os.getcwd()),
                  "env": os.environ.get("SCRIPT_ENV"), "name": __name__, "main": sys.modules["__main__"].__name__}))
threading.Thread(target=lambda: print("a thread joined at exit"), daemon=False).start()
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


@pytest.mark.parametrize("status", [0, 3])
def test_a_forked_script_answers_as_a_new_process(tmp_path: Path, status: int) -> None:
    answers = []
    for fresh in (True, False):
        cwd = tmp_path / ("fresh" if fresh else "forked")
        cwd.mkdir()
        done = run_python(
            SCRIPT, [str(status), "x y"], cwd=cwd, env={"SCRIPT_ENV": "set"}, preload=["json"], fresh=fresh
        )
        files = sorted(p.name for p in cwd.iterdir())
        answers.append((done.returncode, done.stdout.replace(cwd.name, "CWD"), done.stderr, files))
    assert answers[1] == answers[0]
    assert answers[0][0] == status


def test_a_closed_fork_server_has_ended_and_leaves_no_pipe_open() -> None:
    """A worker ends its fork servers at exit: the server by its PID, and its pipes closed (a worker's interpreter
    printed ``ResourceWarning: unclosed file`` for them as it ended)."""
    forks = support._CliForks(("json",))
    pid = forks._server.pid
    forks.close()
    assert forks._server.returncode is not None, pid
    pipes = (forks._server.stdin, forks._server.stdout)
    assert [pipe is not None and pipe.closed for pipe in pipes] == [True, True]
