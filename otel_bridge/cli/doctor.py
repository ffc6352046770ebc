"""``otel-bridge doctor``: every check between the config and the trackers, with the fix for each failure.

Checks, in order (each is ``pass``, ``fail``, ``warn`` or ``skip``):

1. ``config``: the config file loads and validates.
2. ``ray``: Ray is reachable and its head node found (only with ``prometheus.url: auto`` or ``scrape.targets: auto``).
3. ``prometheus``: Prometheus answers, and its version (PromQL path).
4. ``prometheus targets``: every scrape target of Prometheus is ``up``.
   ``step boundaries``: Prometheus' scrape interval against the step lengths of the newest run in ``run.dir``: a
   warning when samples may bound steps that are shorter than two scrape intervals.
5. ``endpoint <url>``: every rollout ``/metrics`` endpoint answers (scrape path).
6. ``metric <key>``: every configured metric returns series now, and from which instances.
7. ``deprecated <name>``: configured vLLM names that vLLM 0.32 removed, with the replacement.
8. ``run dir``: ``run.dir`` can be created and written to.
9. ``tracker <type>``: every tracker backend imports and writes one record into a temporary run directory.

The exit status is 0 only when no check failed. ``--json`` prints ``{"ok", "config", "checks": [{"name", "status",
"detail", "fix"}]}`` (see docs/cli.md). Secrets read from the config's auth settings never appear in the output.
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

from otel_bridge.cli.output import STATUS_COLOURS, colour, format_rows, use_colour
from otel_bridge.config import AUTO, ENV_PREFIX, BridgeConfig, MetricConfig, TrackerConfig
from otel_bridge.errors import ConfigError, DiscoveryError, OtelBridgeError, PrometheusError, ScrapeError
from otel_bridge.producers.metric_set import MetricQuery, resolve_metrics
from otel_bridge.prometheus.client import PrometheusClient
from otel_bridge.prometheus.exposition import ExpositionFamily
from otel_bridge.prometheus.promql import target_duration

Status = Literal["pass", "fail", "warn", "skip"]
STATUSES: tuple[Status, ...] = ("pass", "fail", "warn", "skip")
_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Check:
    """The outcome of one check: ``fix`` says what to change when it did not pass."""

    name: str
    status: Status
    detail: str
    fix: str | None = None


def add_parser(commands: Any) -> None:
    """Register ``doctor`` on the sub-command parsers ``commands``."""
    doctor = commands.add_parser(
        "doctor",
        help="check config, Ray, Prometheus, metrics, endpoints and trackers, with the fix for each failure",
        description="Run every check from the config to the trackers and print a pass/fail table with the fix for "
        "each failure. Exit status 0 only when nothing failed.",
    )
    doctor.add_argument("--config", type=Path, help="otel-bridge config file (default: defaults + environment)")
    doctor.add_argument("--json", action="store_true", help="print the result as JSON (shape in docs/cli.md)")
    doctor.add_argument("--ray-address", default="auto", help="Ray cluster to join when Ray is needed (default auto)")
    doctor.add_argument("--prometheus-url", help="check this Prometheus (overrides prometheus.url of the config)")
    doctor.set_defaults(run=run)


class Doctor:
    """Runs the checks for one config and collects them (secrets scrubbed)."""

    def __init__(
        self, config_path: Path | None, *, ray_address: str = "auto", prometheus_url: str | None = None
    ) -> None:
        self.config_path = config_path
        self.ray_address = ray_address
        self.prometheus_url = prometheus_url
        self.checks: list[Check] = []
        self._secrets: list[str] = []
        self.queries: list[MetricQuery] = []
        self.default_preset: str | None = None  # the preset checked when the config lists no metrics

    # -- recording ---------------------------------------------------------------------------------------------------

    def _scrub(self, text: str | None) -> str | None:
        if text is None:
            return None
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def add(self, name: str, status: Status, detail: str, fix: str | None = None) -> Check:
        """Record one check's outcome."""
        check = Check(name, status, self._scrub(detail) or "", self._scrub(fix))
        self.checks.append(check)
        return check

    @property
    def ok(self) -> bool:
        """No check failed."""
        return all(c.status != "fail" for c in self.checks)

    # -- the checks --------------------------------------------------------------------------------------------------

    def run(self) -> list[Check]:
        """Run every check in order and return them."""
        config = self.check_config()
        if config is None:
            for name in ("ray", "prometheus", "metrics", "trackers"):
                self.add(name, "skip", "the config is invalid")
            return self.checks
        self.check_ray(config)
        client = self.check_prometheus(config)
        families: dict[str, dict[str, ExpositionFamily]] = {}
        if client is not None:
            self.check_prometheus_targets(client)
            self.check_boundaries(config, client)
        elif config.resolved_source() == "scrape":
            families = self.check_endpoints(config)
        try:
            self.check_metrics(config, client, families)
        finally:
            if client is not None:
                client.close()
        self.check_deprecated(config)
        self.check_run_dir(config.run.dir)
        self.check_trackers(config.trackers)
        return self.checks

    def check_run_dir(self, run_dir: Path) -> None:
        """``run dir``: ``run.dir`` can be created and written to (the trackers below write into a temporary one)."""
        created = next((p for p in [run_dir, *run_dir.parents][::-1] if not p.exists()), None)
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=run_dir, prefix=".otel-bridge-doctor-"):
                pass
        except OSError as exc:
            self.add(
                "run dir",
                "fail",
                f"run.dir {run_dir} is not writable: {exc.strerror or exc}",
                "set run.dir to a directory this user can create and write, or fix its permissions",
            )
            return
        finally:
            if created is not None and created.is_dir():
                shutil.rmtree(created, ignore_errors=True)  # only what this check created
        self.add("run dir", "pass", f"run.dir {run_dir} is writable")

    def check_config(self) -> BridgeConfig | None:
        """``config``: the file loads and validates; also collects the secrets to scrub."""
        where = str(self.config_path) if self.config_path else "defaults + environment"
        environ = dict(os.environ)
        if self.prometheus_url is not None:
            environ[f"{ENV_PREFIX}PROMETHEUS__URL"] = self.prometheus_url
        try:
            config = BridgeConfig.load(self.config_path, environ=environ)
        except ConfigError as exc:
            self.add("config", "fail", f"{where}: {exc}", "fix the config as the message says")
            return None
        auth = config.prometheus.auth
        try:
            token = auth.bearer_token()
            basic = auth.basic_auth()
        except ConfigError as exc:
            self.add("config", "fail", f"{where}: prometheus.auth: {exc}", "provide the secret as the message says")
            return None
        self._secrets = [s for s in (token, basic[1] if basic else None) if s]
        # resolve_metrics warns about deprecated names; the "deprecated" checks report them with the fix instead
        metric_set_log = logging.getLogger("otel_bridge.producers.metric_set")
        level = metric_set_log.level
        metric_set_log.setLevel(logging.ERROR)
        try:
            self.queries = resolve_metrics(config.metrics)
        except ConfigError as exc:
            self.add("config", "fail", f"{where}: {exc}", "fix the metrics entries as the message says")
            return None
        finally:
            metric_set_log.setLevel(level)
        source = config.resolved_source()
        entries = f"{len(config.metrics)} metric entries"
        if not config.metrics and source is not None:
            self.default_preset = "vllm"
            self.queries = resolve_metrics([MetricConfig(preset=self.default_preset)])
            entries = f"no metric entries (the {self.default_preset} preset's metrics are checked)"
        self.add(
            "config",
            "pass",
            f"{where}: valid; infrastructure source: {source or 'none (trainer metrics only)'}, {entries}",
        )
        return config

    def check_ray(self, config: BridgeConfig) -> None:
        """``ray``: when something is discovered from Ray, join the cluster and find its head node."""
        wanted = [
            key
            for key, value in (("prometheus.url", config.prometheus.url), ("scrape.targets", config.scrape.targets))
            if value == AUTO
        ]
        if not wanted:
            self.add("ray", "skip", "nothing is discovered from Ray (no `auto` in prometheus.url / scrape.targets)")
            return
        try:
            from otel_bridge.discovery.ray_cluster import head_node_address, import_ray

            ray = import_ray()
            if not ray.is_initialized():
                ray.init(address=self.ray_address, logging_level=logging.ERROR)
            head = head_node_address()
        except (ConfigError, DiscoveryError) as exc:
            self.add(
                "ray", "fail", f"{', '.join(wanted)}: auto: {exc}", "start Ray or configure the address explicitly"
            )
            return
        except Exception as exc:  # noqa: BLE001 - ray.init raises many kinds; each is reported with its type
            self.add(
                "ray",
                "fail",
                f"cannot join the Ray cluster at {self.ray_address!r}: {type(exc).__name__}: {exc}",
                "run on a node of the cluster (ray start --head), pass --ray-address HOST:PORT, or configure "
                f"{' and '.join(wanted)} explicitly",
            )
            return
        self.add("ray", "pass", f"head node {head} (for {', '.join(wanted)}: auto)")

    def check_prometheus(self, config: BridgeConfig) -> PrometheusClient | None:
        """``prometheus``: the URL resolves and Prometheus answers; returns a client, or ``None``."""
        from otel_bridge.cli.discover import prometheus_url_origin
        from otel_bridge.cli.query import prometheus_client
        from otel_bridge.discovery import resolve_prometheus_url

        if config.resolved_source() != "promql":
            self.add("prometheus", "skip", "not used: the metrics are read from the endpoints (scrape path)")
            return None
        prom = config.prometheus
        assert prom.url is not None
        try:
            if prom.url == AUTO:
                resolution = resolve_prometheus_url(AUTO, ray_port=prom.ray_port)
                url, source = resolution.url, resolution.source
            else:
                url = prom.url
                source = (
                    "--prometheus-url" if self.prometheus_url else prometheus_url_origin(self.config_path) or "config"
                )
        except DiscoveryError as exc:
            self.add(
                "prometheus",
                "fail",
                f"prometheus.url: auto found nothing: {exc}",
                "set prometheus.url or OTEL_BRIDGE_PROMETHEUS_URL, or run where Ray's head runs Prometheus",
            )
            return None
        client = prometheus_client(config, url)
        try:
            info = client.buildinfo()
        except PrometheusError as exc:
            client.close()
            self.add(
                "prometheus",
                "fail",
                f"{url} (from {source}): {exc}",
                f"start Prometheus at {url} or correct prometheus.url",
            )
            return None
        self.add("prometheus", "pass", f"{url} (from {source}): Prometheus {info.get('version', '?')}")
        return client

    def check_prometheus_targets(self, client: PrometheusClient) -> None:
        """``prometheus targets``: every active scrape target is up."""
        try:
            targets = client.targets()
        except PrometheusError as exc:
            self.add("prometheus targets", "fail", str(exc), "check Prometheus (see the prometheus check)")
            return
        if not targets:
            self.add(
                "prometheus targets",
                "fail",
                "Prometheus scrapes nothing",
                "add the rollout servers to its scrape config (otel-bridge prometheus-config writes one)",
            )
            return
        down = [t for t in targets if t.get("health") != "up"]
        up = len(targets) - len(down)
        if down:
            what = "; ".join(
                f"{t.get('scrapeUrl', '?')}: {t.get('health')} ({t.get('lastError') or 'no error yet'})" for t in down
            )
            self.add(
                "prometheus targets",
                "fail",
                f"{up}/{len(targets)} up; down: {what}",
                "start the servers that are down, or remove them from Prometheus' scrape config",
            )
        else:
            self.add("prometheus targets", "pass", f"{up}/{len(targets)} up")

    def check_boundaries(self, config: BridgeConfig, client: PrometheusClient) -> None:
        """``step boundaries``: Prometheus' scrape interval against the steps of the latest run in ``run.dir``."""
        try:
            targets = client.targets()
        except PrometheusError as exc:
            self.add("step boundaries", "skip", f"Prometheus' targets are unknown: {exc}")
            return
        intervals = [target_duration(t.get("scrapeInterval")) for t in targets]
        interval = max((i for i in intervals if i is not None), default=config.prometheus.scrape_interval_s)
        prom = config.prometheus
        mode = {
            "samples": "Prometheus' samples (prometheus.boundary: samples)",
            "scrape": "the bridge's own boundary scrapes (prometheus.boundary: scrape)",
            "auto": f"boundary scrapes when at most {prom.boundary_max_targets} reachable targets serve the metrics, "
            "else Prometheus' samples (prometheus.boundary: auto)",
        }[prom.boundary]
        steps = _latest_step_seconds(config.run.dir)
        if steps is None:
            self.add(
                "step boundaries",
                "pass",
                f"Prometheus scrapes every {interval:g}s; boundaries observed by {mode}; no run in {config.run.dir} "
                "to compare step lengths with",
            )
            return
        run, median = steps
        detail = (
            f"Prometheus scrapes every {interval:g}s and the steps of {run} last {median:.3g}s (median); "
            f"boundaries observed by {mode}"
        )
        if interval <= median / 2 or prom.boundary == "scrape":
            self.add("step boundaries", "pass", detail)
            return
        self.add(
            "step boundaries",
            "warn",
            detail + f": where Prometheus' samples bound a step, its counters may be off by up to {interval:g}s of "
            "traffic (each record says by how much in otel_bridge/boundary_lag_s)",
            "let the bridge scrape at boundaries (prometheus.boundary: auto or scrape, targets reachable from the "
            f"trainer) or lower Prometheus' scrape_interval below {median / 2:.3g}s",
        )

    def check_endpoints(self, config: BridgeConfig) -> dict[str, dict[str, ExpositionFamily]]:
        """``endpoint <url>``: every rollout endpoint answers; returns each one's parsed families."""
        from otel_bridge.discovery import ray_service_discovery_targets
        from otel_bridge.prometheus.endpoint import MetricsEndpoint
        from otel_bridge.prometheus.exposition import parse_exposition

        targets = config.scrape_targets
        if config.scrape.targets == AUTO:
            try:
                found = ray_service_discovery_targets(
                    config.scrape.ray_service_discovery_file, temp_dir=config.scrape.ray_temp_dir
                )
            except DiscoveryError as exc:
                self.add("endpoints", "fail", f"scrape.targets: auto: {exc}", "set scrape.targets explicitly")
                return {}
            targets = [f"http://{t}/metrics" if "://" not in t else t for t in found]
        if not targets:
            self.add("endpoints", "fail", "no scrape targets", "list the rollout servers under scrape.targets")
            return {}
        families: dict[str, dict[str, ExpositionFamily]] = {}
        for url in targets:
            endpoint = MetricsEndpoint(url, timeout_s=config.scrape.timeout_s)
            try:
                families[url] = parse_exposition(endpoint.fetch())
            except (ScrapeError, OtelBridgeError) as exc:
                self.add(f"endpoint {url}", "fail", str(exc), f"start the server at {url} or fix scrape.targets")
                continue
            finally:
                endpoint.close()
            self.add(f"endpoint {url}", "pass", f"{len(families[url])} metric families")
        return families

    def check_metrics(
        self,
        config: BridgeConfig,
        client: PrometheusClient | None,
        families: dict[str, dict[str, ExpositionFamily]],
    ) -> None:
        """``metric <key>``: every configured metric has series now (Prometheus or the endpoints' expositions)."""
        if not self.queries:
            self.add("metrics", "skip", "no metrics configured")
            return
        if self.default_preset is not None:
            self.add(
                "metrics",
                "warn",
                f"no metrics configured: a run records no infrastructure metrics; checking the {self.default_preset} "
                "preset's metrics instead",
                f"list the metrics to record, e.g. `metrics: [{{preset: {self.default_preset}}}]`",
            )
        queries = self.queries
        if client is not None:
            self._metrics_from_prometheus(config, client, queries)
        elif families:
            self._metrics_from_endpoints(queries, families)
        else:
            self.add("metrics", "skip", "no source answered (see the checks above)")

    def _metrics_from_prometheus(
        self, config: BridgeConfig, client: PrometheusClient, queries: Sequence[MetricQuery]
    ) -> None:
        from otel_bridge.prometheus import promql

        try:
            known = sorted(client.metadata())
        except PrometheusError as exc:
            self.add("metrics", "fail", f"cannot read Prometheus' metadata: {exc}", "see the prometheus check")
            return
        lookback = promql.duration(2 * config.prometheus.scrape_interval_s)
        for query in queries:
            name = f"metric {query.key_name}"
            try:
                if query.promql is not None:
                    expr = query.promql.replace("$window", lookback)
                    result = client.query(expr)
                    self._series_check(name, [dict(s.labels) for s in result.series], query.promql, known)
                    continue
                missing: list[str] = []
                labels: list[dict[str, str]] = []
                for alternatives in self._sample_names(query):
                    selector = _selector(alternatives, dict(query.matchers))
                    result = client.query(f"last_over_time({selector}[{lookback}])")
                    if not result.series:
                        missing.append(" or ".join(alternatives))
                    labels.extend(dict(s.labels) for s in result.series)
            except PrometheusError as exc:
                self.add(name, "fail", str(exc), "fix the expression or check Prometheus")
                continue
            if missing:
                self._series_check(name, [], " and ".join(missing), known)
            else:
                self._series_check(name, labels, query.name or "", known)

    @staticmethod
    def _sample_names(query: MetricQuery) -> list[tuple[str, ...]]:
        """Per sample name the query needs, the names that prove it exists (a histogram by its ``_count``)."""
        if query.ratio is not None:
            return [(n,) for n in query.ratio]
        assert query.name is not None
        if query.kind == "histogram":
            return [(f"{query.name}_count",)]
        if query.kind is None:
            return [(query.name, f"{query.name}_count")]
        return [(query.name,)]

    def _series_check(self, name: str, labels: list[dict[str, str]], what: str, known: Iterable[str]) -> None:
        if labels:
            instances = sorted({series.get("instance", "") for series in labels} - {""})
            where = f"; instance: {', '.join(instances)}" if instances else ""
            self.add(name, "pass", f"{len(labels)} series{where}")
            return
        first = what.split(" and ")[0].split(" or ")[0]
        for suffix in ("_count", "_bucket", "_sum"):
            first = first.removesuffix(suffix)
        close = difflib.get_close_matches(first, list(known), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        self.add(
            name,
            "fail",
            f"no series for {what}",
            f"{hint}check the metric name and labels in the config, and that the server exporting it is scraped",
        )

    def _metrics_from_endpoints(
        self, queries: Sequence[MetricQuery], families: dict[str, dict[str, ExpositionFamily]]
    ) -> None:
        known = sorted({name for found in families.values() for name in found})
        for query in queries:
            name = f"metric {query.key_name}"
            if query.promql is not None:
                self.add(name, "fail", "a PromQL metric on the scrape path", "set prometheus.url (source: promql)")
                continue
            wanted = query.ratio if query.ratio is not None else (query.name or "",)
            where = [
                url for url, found in families.items() if all(n in found and _matches(found[n], query) for n in wanted)
            ]
            if where:
                hosts = [u.split("//", 1)[-1].split("/", 1)[0] for u in where]
                self.add(name, "pass", f"{len(where)}/{len(families)} endpoints; instance: {', '.join(hosts)}")
            else:
                self._series_check(name, [], " and ".join(wanted), known)

    def check_deprecated(self, config: BridgeConfig) -> None:
        """``deprecated <name>``: vLLM names removed in vLLM 0.32, with the replacement."""
        from otel_bridge.producers.presets import DEPRECATED, replacement_text

        used = [(i, m.name) for i, m in enumerate(config.metrics) if m.name is not None and m.name in DEPRECATED]
        if not used:
            self.add("deprecated names", "pass", "no deprecated vLLM metric names configured")
            return
        for index, old in used:
            self.add(
                f"deprecated {old}",
                "fail",
                f"metrics[{index}] uses {old}, removed in vLLM 0.32 (queried as its replacement for now)",
                f"replace it with {replacement_text(old)}",
            )

    def check_trackers(self, trackers: Sequence[TrackerConfig]) -> None:
        """``tracker <type>``: each backend imports and writes one record into a temporary run directory."""
        if not trackers:
            self.add("trackers", "warn", "no trackers configured: records go nowhere", "add e.g. {type: jsonl}")
            return
        for tracker in trackers:
            self._check_tracker(tracker)

    def _check_tracker(self, tracker: TrackerConfig) -> None:
        from otel_bridge.exporters.backends.registry import create_backend
        from otel_bridge.exporters.record import StepRecord

        name = f"tracker {tracker.type}"
        options = tracker.options()
        if tracker.type == "wandb":
            options = {k: v for k, v in options.items() if k != "dir"} | {"mode": "offline"}
        with tempfile.TemporaryDirectory(prefix="otel-bridge-doctor-") as tmp:
            run_dir = Path(tmp) / "otel-bridge-doctor"
            run_dir.mkdir()
            if tracker.type == "mlflow" and "tracking_uri" not in options and not os.environ.get("MLFLOW_TRACKING_URI"):
                options = options | {"tracking_uri": f"sqlite:///{Path(tmp) / 'mlflow.db'}"}
            record = StepRecord(step=0, values={"otel_bridge/doctor": 1.0}, time=time.time(), window_start=None)
            wandb_env = _temporary_env({"WANDB_SILENT": "true", "WANDB_DIR": tmp}) if tracker.type == "wandb" else None
            try:
                backend = create_backend(tracker.type, options, run_dir)
                try:
                    if tracker.type != "console":
                        backend.write(record)
                        backend.flush()
                finally:
                    backend.close()
            except ConfigError as exc:
                self.add(name, "fail", str(exc), "fix the tracker's options or install its extra as the message says")
                return
            except Exception as exc:  # noqa: BLE001 - any failure of a tracker library is reported with its type
                self.add(name, "fail", f"{type(exc).__name__}: {exc}", f"fix the {tracker.type} tracker setup")
                return
            finally:
                if wandb_env is not None:
                    wandb_env()
        what = (
            "created (writes to the terminal)" if tracker.type == "console" else "imported, wrote and closed one record"
        )
        self.add(name, "pass", f"{what} (in a temporary run directory{', offline' if tracker.type == 'wandb' else ''})")


def _latest_step_seconds(run_dir: Path) -> tuple[Path, float] | None:
    """The newest ``<run.dir>/*/metrics.jsonl`` and the median length of its steps' windows (``None``: no such run)."""
    runs = sorted(run_dir.glob("*/metrics.jsonl"), key=lambda p: p.stat().st_mtime) if run_dir.is_dir() else []
    for path in reversed(runs):
        lengths = []
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                start, end = record.get("window_start"), record.get("time")
                if isinstance(start, int | float) and isinstance(end, int | float) and end > start:
                    lengths.append(end - start)
        if lengths:
            return path.parent, statistics.median(lengths)
    return None


def _selector(names: Sequence[str], matchers: dict[str, str]) -> str:
    """``{__name__=~"a|b", label="value"}``: any of ``names`` with the equality ``matchers``."""
    from otel_bridge.prometheus import promql

    inner = [f"__name__=~{promql.regex_alternation(names)}"]
    inner += [f"{promql.validate_label_name(k)}={promql.quote_label_value(v)}" for k, v in sorted(matchers.items())]
    return "{" + ",".join(inner) + "}"


def _matches(family: ExpositionFamily, query: MetricQuery) -> bool:
    return any(query.matches(sample.labels) for sample in family.samples)


def _temporary_env(values: dict[str, str]) -> Callable[[], None]:
    """Set environment variables now; the returned function restores them."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)

    def restore() -> None:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    return restore


def render_table(checks: Sequence[Check], stream: TextIO, width: int | None = None) -> str:
    """The human-readable report: a table of checks (details cut to the terminal), then each problem and its fix."""
    coloured = use_colour(stream)
    width = width or shutil.get_terminal_size((120, 24)).columns
    name_width = max(len(c.name) for c in checks)
    room = max(30, width - name_width - 10)
    rows = [
        [colour(c.status.upper(), STATUS_COLOURS[c.status], coloured), c.name, _cut(c.detail, room)] for c in checks
    ]
    text = format_rows(["status", "check", "detail"], rows)
    problems = [c for c in checks if c.status in ("fail", "warn") and c.fix]
    if problems:
        text += "\n\nto fix:"
        for check in problems:
            name = colour(check.name, STATUS_COLOURS[check.status], coloured)
            text += f"\n  {name}: {check.detail}\n    fix: {check.fix}"
    failed = sum(c.status == "fail" for c in checks)
    summary = f"{failed} check(s) failed" if failed else "all checks passed"
    return text + "\n\n" + colour(summary, "red" if failed else "green", coloured) + "\n"


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def as_json(doctor: Doctor) -> dict[str, Any]:
    """The ``--json`` document: ``{"ok", "config", "checks": [{"name", "status", "detail", "fix"}]}``."""
    return {
        "ok": doctor.ok,
        "config": str(doctor.config_path) if doctor.config_path else None,
        "checks": [asdict(c) for c in doctor.checks],
    }


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Run the checks and print the table (or JSON); exit status 0 when nothing failed, else 1."""
    doctor = Doctor(args.config, ray_address=args.ray_address, prometheus_url=args.prometheus_url)
    doctor.run()
    if args.json:
        out.write(json.dumps(as_json(doctor), indent=2) + "\n")
    elif not args.quiet or not doctor.ok:
        out.write(render_table(doctor.checks, out))
    return 0 if doctor.ok else 1
