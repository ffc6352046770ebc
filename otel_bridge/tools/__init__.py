"""Tools around a run, never imported by one: only the command line (:mod:`otel_bridge.cli`) imports them.

- :mod:`~otel_bridge.tools.demo`: the demo run (``otel-bridge demo``);
- :mod:`~otel_bridge.tools.simulation`: simulated vLLM rollout servers
  (``python -m otel_bridge.tools.simulation.vllm``);
- :mod:`~otel_bridge.tools.local_prometheus`: a real Prometheus started for the demo and the tests;
- :mod:`~otel_bridge.tools.prometheus_files`: Prometheus' own files written for a config: its scrape config, the
  recording-rule file, file-discovery targets (``otel-bridge prometheus-config`` and ``prometheus-rules``).
"""
