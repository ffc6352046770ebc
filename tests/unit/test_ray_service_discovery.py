"""Ray's Prometheus service-discovery file: parsing, locating, staleness (no Ray needed)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from otel_bridge.discovery import (
    SERVICE_DISCOVERY_FILE,
    ServiceDiscoveryFileError,
    TargetGroup,
    find_service_discovery_file,
    parse_service_discovery,
    ray_service_discovery_targets,
    read_service_discovery_file,
)
from otel_bridge.errors import DiscoveryError

RAY_FILE = [
    {"labels": {"job": "ray"}, "targets": ["10.0.0.1:45759", "10.0.0.1:44217", "10.0.0.1:44227"]},
    {"targets": ["10.0.0.2:45759"]},
]


def _write(path: Path, content: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


def test_parse_ray_file() -> None:
    groups = parse_service_discovery(json.dumps(RAY_FILE))
    assert groups == [
        TargetGroup(("10.0.0.1:45759", "10.0.0.1:44217", "10.0.0.1:44227"), {"job": "ray"}),
        TargetGroup(("10.0.0.2:45759",), {}),
    ]


def test_empty_list_is_valid() -> None:
    assert parse_service_discovery("[]") == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "not JSON"),
        ('[{"targets": ["a:1"]', "not JSON"),
        ('{"targets": ["a:1"]}', "the top level is dict"),
        ('["a:1"]', "entry [0] is str"),
        ('[{"targets": "a:1"}]', "entry [0].targets is str"),
        ('[{"labels": {}}]', "entry [0].targets is NoneType"),
        ('[{"targets": ["a:1"], "labels": {"job": 1}}]', "entry [0].labels is dict"),
        ('[{"targets": ["a:1"], "extra": 1}]', "unknown keys ['extra']"),
        ('[{"targets": ["a:1", "http://b:2/metrics"]}]', "entry [0].targets[1]"),
        ('[{"targets": [1234]}]', "entry [0].targets[0] must be a 'host:port' string"),
    ],
)
def test_malformed_file_is_a_typed_error_saying_what_is_wrong(tmp_path: Path, text: str, problem: str) -> None:
    path = _write(tmp_path / SERVICE_DISCOVERY_FILE, text)
    with pytest.raises(ServiceDiscoveryFileError) as info:
        read_service_discovery_file(path)
    error = info.value
    assert isinstance(error, DiscoveryError)
    assert error.path == path
    assert str(path) in str(error)
    assert "is malformed" in str(error)
    assert problem in str(error)
    assert "Prometheus file_sd JSON" in str(error)


def test_unreadable_file_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(ServiceDiscoveryFileError, match="cannot read Ray service-discovery file"):
        read_service_discovery_file(tmp_path / "missing.json")


def test_stale_file_is_refused_unless_asked(tmp_path: Path) -> None:
    path = _write(tmp_path / SERVICE_DISCOVERY_FILE, RAY_FILE)
    old = time.time() - 600
    os.utime(path, (old, old))
    with pytest.raises(
        ServiceDiscoveryFileError, match=r"last written 600s ago.*cluster that wrote it is probably gone"
    ):
        read_service_discovery_file(path, max_age_s=60)
    assert len(read_service_discovery_file(path, max_age_s=None)) == 2


def test_find_explicit_path(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.json", RAY_FILE)
    assert find_service_discovery_file(path, environ={}, use_ray_session=False) == path
    with pytest.raises(DiscoveryError, match="does not exist: fix the path"):
        find_service_discovery_file(tmp_path / "nope.json", environ={}, use_ray_session=False)


def test_find_explicit_temp_dir_before_ray_tmpdir(tmp_path: Path) -> None:
    temp_dir = tmp_path / "ray-temp"
    in_temp = _write(temp_dir / SERVICE_DISCOVERY_FILE, RAY_FILE)
    _write(tmp_path / "envtmp" / "ray" / SERVICE_DISCOVERY_FILE, RAY_FILE)
    environ = {"RAY_TMPDIR": str(tmp_path / "envtmp")}
    assert find_service_discovery_file(temp_dir=temp_dir, environ=environ, use_ray_session=False) == in_temp


def test_find_ray_tmpdir_is_ray_tmpdir_slash_ray(tmp_path: Path) -> None:
    expected = _write(tmp_path / "ray" / SERVICE_DISCOVERY_FILE, RAY_FILE)
    got = find_service_discovery_file(environ={"RAY_TMPDIR": str(tmp_path)}, use_ray_session=False)
    assert got == expected


def test_not_found_lists_every_place_tried_and_never_guesses_tmp_ray(tmp_path: Path) -> None:
    with pytest.raises(DiscoveryError) as info:
        find_service_discovery_file(temp_dir=tmp_path / "t", environ={}, use_ray_session=False)
    tried = info.value.tried
    assert [t.split(":")[0] for t in tried] == ["explicit Ray temp dir", "running Ray session", "env RAY_TMPDIR"]
    assert str(tmp_path / "t" / SERVICE_DISCOVERY_FILE) in tried[0]
    assert "/tmp/ray/" not in "\n".join(tried)
    assert "set RAY_TMPDIR, or call ray.init()" in str(info.value)


def test_targets_are_the_sorted_union_of_the_groups(tmp_path: Path) -> None:
    path = _write(tmp_path / SERVICE_DISCOVERY_FILE, RAY_FILE)
    assert ray_service_discovery_targets(path, environ={}, use_ray_session=False) == [
        "10.0.0.1:44217",
        "10.0.0.1:44227",
        "10.0.0.1:45759",
        "10.0.0.2:45759",
    ]
