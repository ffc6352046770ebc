"""A server that runs ``python -m otel_bridge.cli`` (or a ``python -c`` script) in processes forked from one interpreter
that imported what they need once.

Starting Python and importing the command line (and matplotlib for ``plot``) cost each ``run_cli`` about a second of
CPU, a hundred times in the quick tier. This server, started once per test process with the environment of a CLI
subprocess (:func:`tests.cli.support.cli_env`), imports them and then, for each request, forks a child that does what a
new ``python -m otel_bridge.cli ARGS`` process does after start-up: it runs in the request's directory with exactly its
environment (``os.environ`` replaced), ``sys.path[0]`` that directory, stdin ``/dev/null``, stdout and stderr on fds 1
and 2 written to the request's files, ``sys.argv`` and ``__main__`` as ``-m`` sets them; its exit status is
Python's (the return value of ``sys.exit``, ``SystemExit``'s rules, an uncaught exception's traceback and 1), after its
non-daemon threads are joined and the ``atexit`` handlers ran. Nothing of otel_bridge reads the environment at import
time (the imports only define), so a child sees what a new process would; :func:`tests.cli.support.run_cli` starts a
real process instead when the request's environment differs in what an interpreter reads at start-up
(:data:`STARTUP_PREFIXES`).

Protocol, one JSON line each way on stdin/stdout: ``{"args", "cwd", "env", "stdout", "stderr"}`` (and ``"code"``: run
``python -c CODE ARGS`` instead, ``sys.argv[0]`` ``-c`` and ``sys.path[0]`` empty, as Python sets them) is answered by
``{"pid"}`` when the child runs and ``{"status"}`` (``os.waitpid``'s, as ``Popen.returncode`` reads it) when it ended.
The modules imported before the first fork are :data:`PRELOADED`, or those named on the server's command line
(``python -m tests.cli.cli_forks MODULE...``: a server for scripts that import heavy trackers).
"""

from __future__ import annotations

import atexit
import io
import json
import os
import runpy
import sys
import threading
import traceback
import types
from collections.abc import Sequence
from typing import Any

#: Environment variables read while Python, or a module this server imports, starts: a request whose environment
#: differs from the server's in one of them needs a new interpreter.
STARTUP_PREFIXES = ("PYTHON", "LANG", "LC_", "MPL")

PRELOADED = (
    "otel_bridge.cli",
    "numpy",
    "matplotlib.figure",
    "matplotlib.backends.backend_agg",
    "matplotlib.image",
)


def _exit_status(exc: BaseException | None) -> int:
    """The status Python exits with after ``exc`` ended its main module (``None``: it returned)."""
    if exc is None:
        return 0
    if isinstance(exc, SystemExit):
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code & 0xFF
        print(exc.code, file=sys.stderr)
        return 1
    traceback.print_exception(exc)
    return 1


def _join_threads() -> None:
    """Wait for the non-daemon threads, as the interpreter does before it exits."""
    while others := [t for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon]:
        for thread in others:
            thread.join()


def _child(request: dict[str, Any]) -> None:
    """In the forked child: become ``python -m otel_bridge.cli ARGS`` and exit as it would."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    encoding, errors = sys.stdout.encoding, sys.stdout.errors
    sys.stdin = open(0, encoding=encoding, errors=errors, closefd=False)  # noqa: SIM115 - the process's own stdin
    sys.stdout = io.TextIOWrapper(open(1, "wb", closefd=False), encoding=encoding, errors=errors)  # noqa: SIM115
    sys.stderr = io.TextIOWrapper(
        open(2, "wb", buffering=0, closefd=False),  # noqa: SIM115
        encoding=encoding,
        errors="backslashreplace",
        line_buffering=True,
    )
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    code: str | None = request.get("code")
    sys.path[0] = os.getcwd() if code is None else ""
    sys.argv = ["-m" if code is None else "-c", *request["args"]]
    exc: BaseException | None = None
    try:
        if code is None:
            runpy.run_module("otel_bridge.cli", run_name="__main__", alter_sys=True)
        else:
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(code, "<string>", "exec"), main.__dict__)  # what python -c does
    except BaseException as raised:  # noqa: BLE001 - every way the main module ends decides the exit status
        exc = raised
    status = _exit_status(exc)
    try:
        _join_threads()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(status)


def serve(preload: Sequence[str] = PRELOADED) -> None:
    """Import ``preload``, then answer requests on stdin until it closes; one child at a time."""
    for name in preload:
        __import__(name)
    channel_in, channel_out = sys.stdin, sys.stdout
    for line in channel_in:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            try:
                _child(request)
            except BaseException:  # noqa: BLE001 - said on stderr, then the child ends whatever happened
                traceback.print_exc()
            finally:
                os._exit(70)  # _child exits itself; this is for a failure while it set the process up
        channel_out.write(json.dumps({"pid": pid}) + "\n")
        channel_out.flush()
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        channel_out.write(json.dumps({"status": code}) + "\n")
        channel_out.flush()


if __name__ == "__main__":
    serve(sys.argv[1:] or PRELOADED)
