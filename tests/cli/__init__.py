"""Tests of fedlight.cli: the command line, Hydra's flags, configs, presets, exit codes."""
