"""Turning collected metrics into tracker records: key naming, step records and the tracker backends."""
