"""Tests of fedlight.data and fedlight.partitions: sources, own datasets, splits."""
