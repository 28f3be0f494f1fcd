"""Tests of fedlight.runs: runs end to end, run directories, faults, sweeps, summary.json."""
