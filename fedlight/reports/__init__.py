"""The reports layer: `fedlight report` (sweep directories into report.md, report.csv and
curves.png: `model.py` its data types, `load.py` the job directories read, `cells.py` mean ± std
per cell, `notes.py` the lines beside the tables, `write.py` the files, `cli.py` the command), an
Optuna study's report (`study_report.py`) and the one curve writer (`curves.py`). It may import the
drivers layer and every layer below it, never a run's or the CLI's modules.
"""
