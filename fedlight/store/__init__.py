"""The store layer: what lands on disk (every file name of a run directory in `run_files.py`,
atomic writes, checkpoints, client-state stores, sweep records); it imports the core layer only.
"""
