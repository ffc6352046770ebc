"""Issue 27 findings 10-12 and the CLI half of 9 (issue 26's CLI points too): every input of the real ``otel-bridge``
command is checked into a one-line error, nothing a server sends reaches the terminal unescaped, and a URL's password
is neither written nor echoed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from otel_bridge import __version__
from otel_bridge.producers.promql._internal.plan import TAG_LABEL
from tests.cli.support import run_cli, write_config
from tests.helpers.http_servers import RecordedRequest, Response, ScriptedHTTPServer, free_port, prom_vector

ESC = "\x1b"


def assert_one_line_error(done: object, *, contains: str) -> None:
    stderr: str = done.stderr  # type: ignore[attr-defined]
    assert done.returncode == 2, (done.stdout, stderr)  # type: ignore[attr-defined]
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("otel-bridge: ")
    assert contains in lines[0], lines[0]


@pytest.mark.parametrize(
    ("args", "contains"),
    [
        (["--at", "1e400"], "--at '1e400' is not a time between 1970 and 9999"),
        (["--at", "inf"], "--at 'inf' is not a time between 1970 and 9999"),
        (["--at", "nan"], "--at 'nan' is not a time between 1970 and 9999"),
        (["--at", "1e20"], "--at '1e20' is not a time between 1970 and 9999"),
        (["--at=-999999999h"], "is longer than a year"),
        (["--window", "99999999999999"], "--window '99999999999999' is longer than a year"),
        (["--at", "10", "--window", "1m"], "reaches back before 1970"),
        (["--at", "\x1b[2Jx"], "--at '\\\\x1b[2Jx' is not a time"),
    ],
)
def test_query_time_inputs_are_one_line_errors(tmp_path: Path, args: list[str], contains: str) -> None:
    done = run_cli(["query", "up", "--prometheus-url", f"http://127.0.0.1:{free_port()}", *args], cwd=tmp_path)
    assert_one_line_error(done, contains=contains)
    assert ESC not in done.stderr


def test_a_url_without_a_scheme_gets_a_suggestion(tmp_path: Path) -> None:
    done = run_cli(["query", "up", "--prometheus-url", "127.0.0.1:9090"], cwd=tmp_path)
    assert_one_line_error(done, contains="did you mean http://127.0.0.1:9090 ?")
    done = run_cli(["doctor", "--prometheus-url", "prom.local:9090"], cwd=tmp_path)
    assert_one_line_error(done, contains="did you mean http://prom.local:9090 ?")
    done = run_cli(["init", "--prometheus", "127.0.0.1:9090"], cwd=tmp_path)
    assert_one_line_error(done, contains="did you mean http://127.0.0.1:9090 ?")
    assert not (tmp_path / "otel-bridge.yaml").exists()


def test_label_values_with_escape_sequences_are_printed_escaped(tmp_path: Path) -> None:
    hostile = {"pod": "a\x1b[2J\x1b]0;owned\x07b", "note": "line\nbreak\u202e"}

    def answer(request: RecordedRequest) -> Response:
        if request.path.startswith("/api/v1/query"):
            # the bridge tags each part of its one query with TAG_LABEL: the raw expression is part "0/"
            return prom_vector([({**hostile, TAG_LABEL: "0/"}, 3.0)], ts=1_700_000_000.0)
        return Response(404, b"not found")

    with ScriptedHTTPServer(answer) as server:
        done = run_cli(
            ["query", "sum by (pod, note) (x)", "--prometheus-url", server.url, "--at", "1700000000"], cwd=tmp_path
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert ESC not in done.stdout
    assert "\x07" not in done.stdout
    assert "\u202e" not in done.stdout
    assert "pod=a\\x1b[2J\\x1b]0;owned\\x07b" in done.stdout
    assert "note=line\\x0abreak\\u202e" in done.stdout


def test_init_with_a_300_character_file_name_is_one_line(tmp_path: Path) -> None:
    done = run_cli(["init", "a" * 300, "--scrape", "127.0.0.1:8000"], cwd=tmp_path)
    assert_one_line_error(done, contains="File name too long; choose a writable PATH")
    assert len(done.stderr) < 300


def test_init_never_writes_nor_echoes_a_urls_password(tmp_path: Path) -> None:
    done = run_cli(["init", "--prometheus", "http://admin:s3cret-pw@127.0.0.1:9090"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "otel-bridge.yaml").read_text(encoding="utf-8")
    for output in (text, done.stdout, done.stderr):
        assert "s3cret-pw" not in output
    config = yaml.safe_load(text)
    assert config["prometheus"]["url"] == "http://127.0.0.1:9090"
    assert config["prometheus"]["auth"] == {"username": "admin", "password_env": "PROMETHEUS_PASSWORD"}
    assert "PROMETHEUS_PASSWORD" in done.stdout

    # the written config is complete: with the password in its environment variable, doctor loads it
    checked = run_cli(["doctor", "--json"], cwd=tmp_path, env={"PROMETHEUS_PASSWORD": "s3cret-pw"})
    assert "s3cret-pw" not in checked.stdout + checked.stderr
    assert '"name": "config",\n      "status": "pass"' in checked.stdout


def test_doctor_never_prints_a_urls_password(tmp_path: Path) -> None:
    url = f"http://admin:s3cret-pw@127.0.0.1:{free_port()}"
    done = run_cli(["doctor", "--prometheus-url", url], cwd=tmp_path)
    assert "s3cret-pw" not in done.stdout + done.stderr
    assert "password_env" in done.stdout + done.stderr  # it says where the password goes instead
    done = run_cli(["doctor", "--prometheus-url", url, "--json"], cwd=tmp_path)
    assert "s3cret-pw" not in done.stdout + done.stderr


@pytest.mark.parametrize("preset", ["vllm", "sglang", "ray", "dcgm", "node"])
def test_init_offers_every_documented_preset(tmp_path: Path, preset: str) -> None:
    done = run_cli(["init", "--scrape", "127.0.0.1:8000", "--preset", preset], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load((tmp_path / "otel-bridge.yaml").read_text(encoding="utf-8"))["metrics"] == [
        {"preset": preset}
    ]


def test_version(tmp_path: Path) -> None:
    done = run_cli(["--version"], cwd=tmp_path)
    assert done.returncode == 0
    assert done.stdout.strip() == f"otel-bridge {__version__}"


def test_a_config_file_path_is_never_echoed_with_escape_sequences(tmp_path: Path) -> None:
    weird = write_config(tmp_path / "x\x1b[31m.yaml", {"bogus": 1})
    done = run_cli(["doctor", "--config", str(weird)], cwd=tmp_path)
    assert ESC not in done.stdout + done.stderr
