"""TensorBoard: event files in `<run dir>/tensorboard/` through Lightning's TensorBoardLogger, one
scalar per metrics.csv column with step = round, and the run's config (`flat_config`) in the
HParams tab, logged once with the first evaluated round's metrics (the tab compares the jobs of a
sweep: `tensorboard --logdir multirun/<date>/<time>`).

The folder is the run's own: a run that resumes or overwrites one replaces it (the rounds before
the resume are replayed into it, as into metrics.csv), so no round appears twice.
"""

import shutil
from dataclasses import dataclass, field
from typing import Any

from fedlight.loggers.base import MetricsRow, RunInfo, flat_config, require_module

TENSORBOARD_DIR = "tensorboard"


@dataclass
class TensorBoardLogger:
    _logger: Any = field(default=None, init=False, repr=False)
    _hparams: dict[str, Any] | None = field(default=None, init=False, repr=False)  # until logged

    def __post_init__(self) -> None:
        require_module("tensorboard", "tensorboard", "tensorboard")

    def start(self, run: RunInfo) -> None:
        from pytorch_lightning.loggers import TensorBoardLogger as LightningTensorBoard

        folder = run.output_dir / TENSORBOARD_DIR
        if folder.is_dir():  # not a link: the run directory was checked for links
            shutil.rmtree(folder)
        self._logger = LightningTensorBoard(
            save_dir=run.output_dir, name=TENSORBOARD_DIR, version="", default_hp_metric=False
        )
        self._hparams = flat_config(run.config, run.choices)

    def log_round(self, row: MetricsRow) -> None:
        metrics = {name: value for name, value in row.items() if name != "round"}
        step = int(row["round"])
        if self._hparams is not None:  # the first row: the HParams tab's run, with its metrics
            self._logger.log_hyperparams(self._hparams, metrics, step=step)
            self._hparams = None
        else:
            self._logger.log_metrics(metrics, step=step)

    def finish(self, summary: dict[str, Any]) -> None:
        self._logger.finalize("success")
