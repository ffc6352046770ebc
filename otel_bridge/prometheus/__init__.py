"""Talking to Prometheus: the HTTP API client, PromQL building and exposition parsing."""
