"""Tracker backends, one module per tracker with its options model; :func:`.registry.create_backend` builds them."""
