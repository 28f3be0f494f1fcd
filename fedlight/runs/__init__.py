"""The runs layer: one job (`job.py`) from typed parts to files (`experiment.py`: its clients in
`federation.py`, its summary in `run_summary.py`), in this process or on workers it launches
(`launch.py`); the run directory, its lock and resume decisions, the
environment record, the exported model, the figures, Optuna studies and tuned settings. It may
import the reports layer and every layer below it, never the CLI.
"""
