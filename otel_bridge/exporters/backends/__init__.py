"""Tracker backends, one module per tracker; :func:`.base.create_backend` builds them from config."""
