"""Centered clipping as an aggregator of its own (docs/howto/add-aggregator.md)."""
