"""Tests of fedlight.drivers and fedlight.system: workers, evaluation, the clock."""
