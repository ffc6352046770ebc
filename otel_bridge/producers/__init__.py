"""Producers: where infrastructure metrics come from (the OTel spec's MetricProducer, per step window)."""
