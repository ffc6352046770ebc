"""pytest plugins of the suite itself (registered in ``tests/conftest.py``): its tiers and its sleep accounting."""
