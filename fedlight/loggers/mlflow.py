"""MLflow: one MLflow run per job through Lightning's MLFlowLogger, named after the job
(`RunInfo.name`, or `logger.mlflow.run_name`), tagged with the group choices; each evaluated
round's metrics with step = round, the run's config (`flat_config`) as its parameters, once.

Where: `logger.mlflow.tracking_uri`, else the MLFLOW_TRACKING_URI environment variable, else a
file store of the run's own in `<run dir>/mlruns` (no server: `mlflow ui --backend-store-uri
<run dir>/mlruns`). The run's own store is replaced by a run that resumes or overwrites it (the
rounds before the resume are replayed into it, as into metrics.csv); a store given elsewhere gets
a new MLflow run each time.

MLflow refuses a metric name that is not a plain path inside the run (its file store writes each
metric to a file of that name): a module's `self.log("../x", ...)` would fail the run after its
first round. Such a name is logged as `mlflow_name` makes it (`_/x`), said once; metrics.csv keeps
the name as logged.
"""

import logging
import os
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fedlight.loggers.base import MetricsRow, RunInfo, flat_config, require_module

MLRUNS_DIR = "mlruns"
REFUSED_CHARACTERS = re.compile(r"[^a-zA-Z0-9_/. -]+")  # what Lightning's MLFlowLogger drops


def mlflow_name(name: str) -> str:
    """`name` as MLflow takes a metric name: only the characters Lightning's MLFlowLogger keeps,
    and a relative path without empty, `.` or `..` parts (each `..` becomes `_`)."""
    parts = REFUSED_CHARACTERS.sub("", name).split("/")
    joined = "/".join("_" if part == ".." else part for part in parts if part not in ("", "."))
    return f"_{joined}" if joined.startswith("..") or not joined else joined


@dataclass
class MLflowLogger:
    experiment_name: str = "fedlight"
    tracking_uri: str | None = None  # None: MLFLOW_TRACKING_URI, else <run dir>/mlruns
    run_name: str | None = None  # None: the job's name
    _logger: Any = field(default=None, init=False, repr=False)
    _names: dict[str, str] = field(default_factory=dict, init=False, repr=False)  # as logged

    def __post_init__(self) -> None:
        require_module("mlflow", "mlflow", "mlflow")

    def start(self, run: RunInfo) -> None:
        from pytorch_lightning.loggers import MLFlowLogger as LightningMLflow

        uri = self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            store = run.output_dir / MLRUNS_DIR
            if store.is_dir():  # not a link: the run directory was checked for links
                shutil.rmtree(store)
            uri = store.resolve().as_uri()
            # MLflow 3 keeps its file store in maintenance mode, refused unless opted into; a
            # database store takes SQLAlchemy and ~6 s and 1 MB per run to set up.
            os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
        self._logger = LightningMLflow(
            experiment_name=self.experiment_name,
            run_name=self.run_name or run.name or None,
            tracking_uri=uri,
            tags={**run.choices, **({"sweep": run.sweep_group} if run.sweep_group else {})},
        )
        # the first call makes the experiment (if new: Lightning warns of it) and the run
        lightning_log = logging.getLogger(LightningMLflow.__module__)
        level = lightning_log.level
        lightning_log.setLevel(logging.ERROR)
        try:
            self._logger.log_hyperparams(flat_config(run.config, run.choices))
        finally:
            lightning_log.setLevel(level)

    def log_round(self, row: MetricsRow) -> None:
        metrics: dict[str, float] = {}
        for name, value in row.items():
            if name != "round":  # a renamed name that meets another keeps the first's value
                metrics.setdefault(self.metric_name(name), value)
        self._logger.log_metrics(metrics, step=int(row["round"]))

    def metric_name(self, name: str) -> str:
        """The name `name` is logged under (`mlflow_name`); a changed one said once."""
        if name not in self._names:
            self._names[name] = mlflow_name(name)
            if self._names[name] != name:
                print(
                    f"fedlight: logger=mlflow: metric {name!r} is logged as "
                    f"{self._names[name]!r} (MLflow takes letters, digits, _ - . space and / in "
                    "names, as a path inside the run); metrics.csv keeps its name",
                    file=sys.stderr,
                    flush=True,
                )
        return self._names[name]

    def shows_clients(self) -> bool:
        return False  # the round's metrics only, as metrics.csv

    def log_clients(self, round_index: int, clients: Sequence[MetricsRow]) -> None:
        pass

    def finish(self, summary: dict[str, Any]) -> None:
        self._logger.finalize("success")
