"""Benchmarks of fedlight (scripts run as files; `peers` runs as `python -m benchmarks.peers`)."""
