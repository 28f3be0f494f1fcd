"""The reports layer: `fedlight report` (`report.py`: sweep directories into report.md,
report.csv and curves.png), an Optuna study's report and the one curve writer (`curves.py`). It
may import the drivers layer and every layer below it, never a run's or the CLI's modules.
"""
