"""``otel-bridge doctor`` checks of the configured metrics: each returns series now (through Prometheus or the
rollout endpoints), and none uses a name vLLM removed."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

from otel_bridge.cli.doctor_base import CheckRecorder
from otel_bridge.config import AUTO, BridgeConfig
from otel_bridge.errors import DiscoveryError, OtelBridgeError, PrometheusError, ScrapeError
from otel_bridge.producers.metric_set import MetricQuery
from otel_bridge.prometheus.client import PrometheusClient
from otel_bridge.prometheus.exposition import ExpositionFamily


class MetricChecks(CheckRecorder):
    """Checks of the rollout endpoints and of every configured metric."""

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


def _selector(names: Sequence[str], matchers: dict[str, str]) -> str:
    """``{__name__=~"a|b", label="value"}``: any of ``names`` with the equality ``matchers``."""
    from otel_bridge.prometheus import promql

    inner = [f"__name__=~{promql.regex_alternation(names)}"]
    inner += [f"{promql.validate_label_name(k)}={promql.quote_label_value(v)}" for k, v in sorted(matchers.items())]
    return "{" + ",".join(inner) + "}"


def _matches(family: ExpositionFamily, query: MetricQuery) -> bool:
    return any(query.matches(sample.labels) for sample in family.samples)
