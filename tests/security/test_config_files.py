"""Hostile configuration files are refused with a typed, bounded error, in bounded memory (issue 27 findings 7-8).

Before: a 376-byte YAML alias bomb exhausted memory (in the code that notes each key's line), deep nesting raised an
untyped ``RecursionError``, a 50 MB value of the wrong type took 58 s and its error message held all 50 million
characters, and thousands of errors made a message as long. Real files; the bomb is loaded in a child process under
a 1 GiB address-space limit, so a regression fails the test instead of the machine.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from otel_bridge import BridgeConfig
from otel_bridge.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]

ALIAS_BOMB = textwrap.dedent(
    """\
    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
    b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
    c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
    d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
    e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
    f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
    g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
    h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
    metrics: [*h,*h,*h,*h,*h,*h,*h,*h,*h]
    """
)

LOAD = textwrap.dedent(
    """
    import sys
    from otel_bridge import BridgeConfig
    from otel_bridge.errors import ConfigError
    try:
        BridgeConfig.load(sys.argv[1], environ={})
    except ConfigError as exc:
        print(f"ConfigError {len(str(exc))}")
        print(str(exc)[:2000])
    """
)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def test_a_yaml_alias_bomb_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(ALIAS_BOMB)
    done = subprocess.run(
        [sys.executable, "-c", LOAD, str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_memory,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    first, _, message = done.stdout.partition("\n")
    assert first.startswith("ConfigError ")
    assert int(first.split()[1]) < 10_000
    assert "aliases" in message
    assert str(path) in message


@pytest.mark.parametrize("opening", ["[", "{a: ", "- "])
def test_deep_nesting_is_a_config_error(tmp_path: Path, opening: str) -> None:
    path = tmp_path / "deep.yaml"
    if opening == "- ":
        path.write_text("metrics:\n" + "".join("  " * i + "- \n" for i in range(1, 3000)))
    else:
        path.write_text("metrics: " + opening * 100_000)
    with pytest.raises(ConfigError, match="nest") as raised:
        BridgeConfig.load(path, environ={})
    assert len(str(raised.value)) < 10_000


def test_a_huge_value_of_the_wrong_type_gives_a_short_error(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text("delivery:\n  close_timeout_s: " + "x" * 5_000_000 + "\n")
    with pytest.raises(ConfigError, match=r"delivery\.close_timeout_s") as raised:
        BridgeConfig.load(path, environ={})
    assert len(str(raised.value)) < 10_000
    assert "5000000 characters" in str(raised.value)


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with path.open("w") as f:
        f.write("run:\n  name: " + "x" * (17 << 20) + "\n")
    with pytest.raises(ConfigError, match="MiB") as raised:
        BridgeConfig.load(path, environ={})
    assert len(str(raised.value)) < 1_000


def test_thousands_of_errors_give_a_bounded_message_that_counts_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "many.yaml"
    path.write_text(yaml.safe_dump({"metrics": [{"nam": f"m{i}"} for i in range(20_000)]}))
    with pytest.raises(ConfigError) as raised:
        BridgeConfig.load(path, environ={})
    message = str(raised.value)
    assert len(message) < 50_000
    assert "(20000 problems)" in message
    assert "and 19950 more" in message
    assert "did you mean 'metrics[0].name'?" in message
