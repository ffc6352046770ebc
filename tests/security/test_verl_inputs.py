"""Odd values in verl's configuration are a ``ConfigError`` naming verl's key (issue 37 finding 10).

Before: ``bridge_config_from_verl`` raised ``TypeError``/``ValueError`` on a model name that is an int and a port of
``"abc"`` or ``None``; a port of 1.5 silently became 1; ``enable: "false"`` (a string) enabled it; ``metrics_to_log:
"vllm:x"`` became six one-letter metrics; the setup hook raised ``OSError`` (File name too long) on a 10,000-character
``OTEL_BRIDGE_CONFIG``; ``Tracking(config=...)`` with a self-referencing or 100,000-deep config raised
``RecursionError``. verl's sections come as OmegaConf configs (what verl's trainer holds: Hydra leaves a value typed
as written on the command line) and as mappings.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from otel_bridge.errors import ConfigError
from otel_bridge.integrations.verl import Tracking, bridge_config_from_verl
from tests.cli.support import cli_env
from tests.helpers.imported_when_used import ImportedWhenUsed

omegaconf = ImportedWhenUsed("omegaconf")

SECTION = "actor_rollout_ref.rollout.prometheus"


def _section(**fields: Any) -> Any:
    return omegaconf.OmegaConf.create({"enable": True, "port": 9090, "file": None, **fields})


@pytest.mark.parametrize(
    ("fields", "key"),
    [
        ({"served_model_name": 7}, "served_model_name"),
        ({"port": "abc"}, "port"),
        ({"port": None}, "port"),
        ({"port": 1.5}, "port"),
        ({"port": 70000}, "port"),
        ({"port": True}, "port"),
        ({"enable": "false"}, "enable"),
        ({"enable": "true"}, "enable"),
        ({"metrics_to_log": "vllm:x"}, "metrics_to_log"),
        ({"metrics_to_log": ["vllm:x", 3]}, "metrics_to_log"),
        ({"file": 12}, "file"),
        ({"file": "x" * 10_000}, "file"),
    ],
)
def test_an_odd_verl_value_is_a_config_error_naming_its_key(fields: dict[str, Any], key: str) -> None:
    for section in (_section(**fields), {"enable": True, **fields}):
        with pytest.raises(ConfigError) as caught:
            bridge_config_from_verl(section)
        assert f"{SECTION}.{key}" in str(caught.value)
        assert len(str(caught.value)) < 500  # a 10,000-character value is not echoed


def test_metrics_to_log_as_an_argument_must_be_a_list() -> None:
    with pytest.raises(ConfigError, match=r"metrics_to_log"):
        bridge_config_from_verl({"enable": True}, metrics_to_log="vllm:x")  # type: ignore[arg-type]
    config = bridge_config_from_verl(_section(metrics_to_log=["vllm:num_requests_running"]))
    assert [m.name for m in config.metrics] == ["vllm:num_requests_running"]


def test_well_typed_verl_values_still_work() -> None:
    config = bridge_config_from_verl(_section(port=9191, served_model_name="/models/qwen"))
    assert config.prometheus.ray_port == 9191
    assert all(m.labels == {"model_name": "qwen"} for m in config.metrics)
    assert not bridge_config_from_verl(_section(enable=False)).metrics


def test_a_cyclic_or_very_deep_trainer_config_is_a_config_error(tmp_path: Path) -> None:
    cyclic: dict[str, Any] = {"trainer": {"total_epochs": 1}}
    cyclic["trainer"]["self"] = cyclic
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(100_000):
        node["a"] = {}
        node = node["a"]
    for config, what in ((cyclic, "trainer.self"), (deep, "nest deeper")):
        with pytest.raises(ConfigError) as caught:
            Tracking("p", "e", "console", config, bridge_config={"run": {"dir": str(tmp_path)}})
        assert what in str(caught.value)
        assert len(str(caught.value)) < 500


def test_the_setup_hook_names_an_overlong_config_variable(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        from otel_bridge.errors import ConfigError
        from otel_bridge.integrations.verl import setup
        try:
            setup()
        except ConfigError as exc:
            print(f"ConfigError: {exc}")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=cli_env({"OTEL_BRIDGE_CONFIG": "metrics: [" + "x" * 10_000 + "]"}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.stdout.startswith("ConfigError: $OTEL_BRIDGE_CONFIG"), done.stdout + done.stderr
    assert len(done.stdout) < 500
