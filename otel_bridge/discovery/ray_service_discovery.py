"""Ray's Prometheus service-discovery file: where it is, and the scrape targets it lists.

Ray's dashboard (head node, ``ray[default]``) rewrites ``prom_metrics_service_discovery.json`` every 5 seconds, in
Prometheus' ``file_sd`` format: ``[{"labels": {"job": "ray"}, "targets": ["10.0.0.7:8080", ...]}]``. It lists every
alive node's metrics agent plus the autoscaler's and the dashboard's own metrics endpoints. Recent Ray versions write
it into the session directory and keep a symlink at ``<temp dir>/prom_metrics_service_discovery.json``; older ones
write it to the temp dir directly.

:func:`find_service_discovery_file` looks for it in this order (the first existing file wins, each step is logged):

1. an explicit ``path``;
2. an explicit Ray temp dir (``ray start --temp-dir`` / ``ray.init(_temp_dir=...)``): ``<temp_dir>/<file>``;
3. the running session (``use_ray_session=True`` and ``ray.init()`` called in this process): its session dir, then
   its temp dir, as the Ray API reports them;
4. ``$RAY_TMPDIR/ray/<file>`` when ``RAY_TMPDIR`` is set (Ray's own rule for its default temp dir).

Ray's built-in default (``/tmp/ray``) is not guessed: a file left there by a finished cluster would give stale targets.
A file older than ``max_age_s`` is refused for the same reason (Ray rewrites it every 5 s while the cluster runs).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from otel_bridge.discovery.targets import validate_target
from otel_bridge.errors import ConfigError, DiscoveryError

_log = logging.getLogger(__name__)

SERVICE_DISCOVERY_FILE = "prom_metrics_service_discovery.json"
ENV_RAY_TMPDIR = "RAY_TMPDIR"
DEFAULT_MAX_AGE_S = 60.0


class ServiceDiscoveryFileError(DiscoveryError):
    """Ray's service-discovery file exists but cannot be read, is malformed, or is stale. ``path`` names it."""

    def __init__(self, message: str, *, path: Path | None) -> None:
        super().__init__(message)
        self.path = path


@dataclass(frozen=True, slots=True)
class TargetGroup:
    """One entry of a ``file_sd`` file: targets (``host:port``) and the labels Prometheus attaches to them."""

    targets: tuple[str, ...]
    labels: dict[str, str] = field(default_factory=dict)


def _describe(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"


def parse_service_discovery(text: str, path: Path | None = None) -> list[TargetGroup]:
    """Parse Prometheus ``file_sd`` JSON (Ray's service-discovery file) into :class:`TargetGroup` objects.

    ``path`` names the file in error messages. Raises :class:`ServiceDiscoveryFileError` when the text is not
    JSON, not a list of ``{"targets": [...], "labels": {...}}`` objects, or a target is not ``host:port``.
    """
    source = str(path) if path is not None else "(text)"

    def bad(message: str) -> ServiceDiscoveryFileError:
        return ServiceDiscoveryFileError(
            f"Ray service-discovery file {source} is malformed: {message}; it should hold Prometheus file_sd JSON "
            '([{"targets": ["host:port", ...], "labels": {...}}]) as written by the Ray dashboard: check that the '
            "path points to Ray's file",
            path=path,
        )

    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise bad(f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(data, list):
        raise bad(f"the top level is {_describe(data)}, not a list")
    groups = []
    for index, item in enumerate(data):
        if not isinstance(item, dict):
            raise bad(f"entry [{index}] is {_describe(item)}, not an object")
        unknown = sorted(set(item) - {"targets", "labels"})
        if unknown:
            raise bad(f"entry [{index}] has unknown keys {unknown} (allowed: targets, labels)")
        targets = item.get("targets")
        if not isinstance(targets, list):
            raise bad(f"entry [{index}].targets is {_describe(targets)}, not a list")
        labels = item.get("labels", {})
        if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            raise bad(f"entry [{index}].labels is {_describe(labels)}, not an object of strings")
        try:
            checked = tuple(validate_target(t, f"entry [{index}].targets[{i}]") for i, t in enumerate(targets))
        except ConfigError as exc:
            raise bad(str(exc)) from None
        groups.append(TargetGroup(checked, dict(labels)))
    return groups


def read_service_discovery_file(path: Path, *, max_age_s: float | None = DEFAULT_MAX_AGE_S) -> list[TargetGroup]:
    """Read and parse Ray's service-discovery file at ``path``.

    Raises :class:`ServiceDiscoveryFileError` when it cannot be read, is malformed, or was last written more than
    ``max_age_s`` seconds ago (``None`` disables that check).
    """
    try:
        stat = path.stat()
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ServiceDiscoveryFileError(
            f"cannot read Ray service-discovery file {path}: {exc.strerror or exc}; check the path and that the Ray "
            "dashboard (ray[default]) runs on this node",
            path=path,
        ) from None
    if max_age_s is not None:
        age = time.time() - stat.st_mtime
        if age > max_age_s:
            raise ServiceDiscoveryFileError(
                f"Ray service-discovery file {path} was last written {age:.0f}s ago (more than {max_age_s:g}s); Ray "
                "rewrites it every 5 s while its dashboard runs, so the cluster that wrote it is probably gone: "
                "start Ray (with ray[default]), point to the running session's file, or pass max_age_s=None",
                path=path,
            )
    return parse_service_discovery(text, path)


def ray_service_discovery_path(temp_dir: str | os.PathLike[str]) -> Path:
    """``<temp_dir>/prom_metrics_service_discovery.json``: the stable path Ray keeps for a temp dir.

    Use this in a Prometheus config (it need not exist yet: Prometheus watches the file).
    """
    return Path(temp_dir) / SERVICE_DISCOVERY_FILE


def find_service_discovery_file(
    path: str | os.PathLike[str] | None = None,
    *,
    temp_dir: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    use_ray_session: bool = True,
) -> Path:
    """Locate Ray's service-discovery file through the order in the module docstring.

    Raises :class:`DiscoveryError` listing every place tried when none holds the file (an explicit ``path`` that does
    not exist is an error at once).
    """
    environ = os.environ if environ is None else environ
    tried: list[str] = []

    def exists(candidate: Path, source: str) -> bool:
        if candidate.is_file():
            _log.info("Ray service-discovery file: %s (from %s)", candidate, source)
            return True
        tried.append(f"{source}: {candidate} does not exist")
        _log.info("Ray service-discovery file: %s", tried[-1])
        return False

    if path is not None:
        explicit = Path(path)
        if exists(explicit, "explicit path"):
            return explicit
        raise DiscoveryError(
            f"Ray service-discovery file {explicit} does not exist: fix the path (Ray writes it to its temp dir, "
            f"e.g. /tmp/ray/{SERVICE_DISCOVERY_FILE}, while its dashboard runs)",
            tried=tried,
        )
    if temp_dir is not None:
        if exists(ray_service_discovery_path(temp_dir), "explicit Ray temp dir"):
            return ray_service_discovery_path(temp_dir)
    else:
        tried.append("explicit Ray temp dir: not given")
    if use_ray_session:
        from otel_bridge.discovery import ray_cluster  # the only module importing ray, lazily

        try:
            dirs = ray_cluster.session_dirs()
        except (ConfigError, DiscoveryError) as exc:
            tried.append(f"running Ray session: {exc}")
            _log.info("Ray service-discovery file: %s", tried[-1])
        else:
            for candidate, source in (
                (dirs.session_dir / SERVICE_DISCOVERY_FILE, "running Ray session's session dir"),
                (dirs.temp_dir / SERVICE_DISCOVERY_FILE, "running Ray session's temp dir"),
            ):
                if exists(candidate, source):
                    return candidate
    else:
        tried.append("running Ray session: not consulted (use_ray_session=False)")
    ray_tmpdir = environ.get(ENV_RAY_TMPDIR, "")
    if ray_tmpdir.strip():
        candidate = Path(ray_tmpdir) / "ray" / SERVICE_DISCOVERY_FILE
        if exists(candidate, f"env {ENV_RAY_TMPDIR}"):
            return candidate
    else:
        tried.append(f"env {ENV_RAY_TMPDIR}: not set")
    raise DiscoveryError(
        "cannot find Ray's Prometheus service-discovery file: pass its path, or the Ray temp dir "
        "(ray start --temp-dir), set RAY_TMPDIR, or call ray.init() in this process; the file exists only on the "
        "head node while the Ray dashboard (ray[default]) runs",
        tried=tried,
    )


def ray_service_discovery_targets(
    path: str | os.PathLike[str] | None = None,
    *,
    temp_dir: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    use_ray_session: bool = True,
    max_age_s: float | None = DEFAULT_MAX_AGE_S,
) -> list[str]:
    """The scrape targets (sorted ``host:port``) listed in Ray's service-discovery file.

    The file is located by :func:`find_service_discovery_file` (same arguments) and read by
    :func:`read_service_discovery_file`.
    """
    found = find_service_discovery_file(path, temp_dir=temp_dir, environ=environ, use_ray_session=use_ray_session)
    groups = read_service_discovery_file(found, max_age_s=max_age_s)
    targets = sorted({t for group in groups for t in group.targets})
    _log.info("Ray service-discovery targets (%s): %s", found, ", ".join(targets) or "none")
    return targets
