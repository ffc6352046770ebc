"""Issue 27 (the CLI's own inputs): ``otel-bridge plot`` on hostile record files and sizes. Values of ±1e308,
``10**400`` as a value or a step, non-UTF-8 bytes, deep nesting, 3,000 key groups or 100,000 keys, escape sequences
in keys: the real command writes a bounded PNG, says in one line per kind what it left out, prints nothing
unescaped, and never a traceback; ``--width 65000`` is a one-line error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from tests.cli.support import run_cli

ESC = "\x1b"


def write_lines(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def record(step: int, **values: object) -> bytes:
    return json.dumps({"step": step, **values}).encode()


def png_size(png: Path) -> tuple[int, int]:
    with Image.open(png) as image:
        return image.size


def assert_clean(done: object) -> None:
    out: str = done.stdout + done.stderr  # type: ignore[attr-defined]
    assert done.returncode == 0, out  # type: ignore[attr-defined]
    assert "Traceback" not in out
    assert ESC not in out
    assert "\x07" not in out


def test_hostile_values_lines_and_keys_are_left_out_with_a_line_each(tmp_path: Path) -> None:
    hostile_key = "\x1b]0;owned\x07\x1b[2Jevil/loss"
    lines = [
        record(0, **{"actor/loss": 1.0, "big/x": 1e308, "big/y": -1e308, hostile_key: 1.0}),
        record(1, **{"actor/loss": 0.5, "big/x": 1.0, hostile_key: 2.0}),
        b'{"step": 2, "actor/loss": ' + str(10**400).encode() + b"}",  # a value beyond float
        b'{"step": ' + str(10**400).encode() + b', "actor/loss": 1.0}',  # a step beyond 2**53
        b'{"step": 3, "actor/loss": 0.25, "bad": "\xff\xfe"}',  # not UTF-8
        b"[" * 200_000,  # nested too deep for the JSON reader
        record(4, **{"actor/loss": 0.125}),
    ]
    source = write_lines(tmp_path / "hostile.jsonl", lines)
    png = tmp_path / "hostile.png"
    done = run_cli(["plot", str(source), "-o", str(png)], cwd=tmp_path)
    assert_clean(done)
    assert png.is_file()
    assert "1 line(s) not UTF-8 skipped (line 5)" in done.stderr
    assert "1 line(s) not JSON skipped (line 6)" in done.stderr
    assert "1 line(s) not a step record (no integer 'step' in 0..2**53) skipped (line 4)" in done.stderr
    assert "\\x1b]0;owned\\x07\\x1b[2Jevil/loss" in done.stdout  # the key is named, escaped


def test_width_beyond_the_bound_is_one_line(tmp_path: Path) -> None:
    source = write_lines(tmp_path / "r.jsonl", [record(0, **{"a/b": 1.0}), record(1, **{"a/b": 2.0})])
    done = run_cli(["plot", str(source), "-o", str(tmp_path / "x.png"), "--width", "65000"], cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "otel-bridge: --width and --height must be 100 to 8000 pixels, got 65000xauto"
    ]
    assert not (tmp_path / "x.png").exists()


def test_3000_key_groups_are_capped_and_say_what_was_left_out(tmp_path: Path) -> None:
    keys = {f"group{i:04d}/value": float(i) for i in range(3000)}
    source = write_lines(tmp_path / "groups.jsonl", [record(step, **keys) for step in range(3)])
    png = tmp_path / "groups.png"
    done = run_cli(["plot", str(source), "-o", str(png)], cwd=tmp_path)
    assert_clean(done)
    assert "3000 panels are too many for one image: the first 36 are drawn, 2964 key group(s) left out" in done.stderr
    assert png_size(png) == (1200, 60 + 12 * 280)


@pytest.mark.parametrize("layout", ["one group", "own groups"])
def test_100000_keys_are_bounded(tmp_path: Path, layout: str) -> None:
    name = (lambda i: f"family/k{i:06d}") if layout == "one group" else (lambda i: f"g{i:06d}/v")
    keys = {name(i): 1.0 for i in range(100_000)}
    source = write_lines(tmp_path / "keys.jsonl", [record(0, **keys), record(1, **keys)])
    png = tmp_path / "keys.png"
    done = run_cli(["plot", str(source), "-o", str(png)], cwd=tmp_path)
    assert_clean(done)
    assert "the records have more than 20000 keys" in done.stderr
    if layout == "one group":
        assert "key(s) left out: at most 12 lines a panel" in done.stderr
    else:
        assert "the first 36 are drawn" in done.stderr
