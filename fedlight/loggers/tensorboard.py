"""TensorBoard: event files in `<run dir>/tensorboard/` through Lightning's TensorBoardLogger, one
scalar per metrics.csv column with step = round, and the run's config (`flat_config`) in the
HParams tab, logged once with the first evaluated round's metrics (the tab compares the jobs of a
sweep: `tensorboard --logdir multirun/<date>/<time>`).

With `logger.tensorboard.client_histograms` (the default), each round also gets histograms of its
participants' `update_norm` and `train_loss` (`clients/update_norm`, ...: the Histograms tab shows
how the clients spread, where a scalar shows only their mean; none under secure aggregation, whose
rounds give no per-client rows); at the end the run's figures
(curves.png, the label histogram, ...) are images (`figures/curves`, ...) in the Images tab.

The folder is the run's own: a run that resumes or overwrites one replaces it (the rounds before
the resume are replayed into it, as into metrics.csv), so no round appears twice; the histograms
of the replayed rounds are not kept (metrics.csv has no per-client rows).
"""

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedlight.core.errors import require
from fedlight.loggers.base import MetricsRow, RunInfo, flat_config, require_module
from fedlight.store.run_files import drawn_figures

TENSORBOARD_DIR = "tensorboard"
HISTOGRAMS = ("update_norm", "train_loss")  # the per-client columns drawn as histograms


@dataclass
class TensorBoardLogger:
    client_histograms: bool = True  # each round's per-client HISTOGRAMS
    _logger: Any = field(default=None, init=False, repr=False)
    _hparams: dict[str, Any] | None = field(default=None, init=False, repr=False)  # until logged
    _output_dir: Path | None = field(default=None, init=False, repr=False)
    _last_round: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        require_module("tensorboard", "tensorboard", "tensorboard")
        require(
            isinstance(self.client_histograms, bool),
            f"logger.tensorboard.client_histograms={self.client_histograms} must be true or false",
        )

    def start(self, run: RunInfo) -> None:
        from pytorch_lightning.loggers import TensorBoardLogger as LightningTensorBoard

        folder = run.output_dir / TENSORBOARD_DIR
        if folder.is_dir():  # not a link: the run directory was checked for links
            shutil.rmtree(folder)
        self._logger = LightningTensorBoard(
            save_dir=run.output_dir, name=TENSORBOARD_DIR, version="", default_hp_metric=False
        )
        self._hparams = flat_config(run.config, run.choices)
        self._output_dir = run.output_dir

    def log_round(self, row: MetricsRow) -> None:
        metrics = {name: value for name, value in row.items() if name != "round"}
        step = self._last_round = int(row["round"])
        if self._hparams is not None:  # the first row: the HParams tab's run, with its metrics
            self._logger.log_hyperparams(self._hparams, metrics, step=step)
            self._hparams = None
        else:
            self._logger.log_metrics(metrics, step=step)

    def shows_clients(self) -> bool:
        return self.client_histograms

    def log_clients(self, round_index: int, clients: Sequence[MetricsRow]) -> None:
        if not self.client_histograms:
            return
        for name in HISTOGRAMS:
            values = np.array([float(row[name]) for row in clients if name in row])
            values = values[np.isfinite(values)]  # a diverged client's NaN has no bin
            if values.size:
                self._logger.experiment.add_histogram(f"clients/{name}", values, round_index)

    def finish(self, summary: dict[str, Any]) -> None:
        from PIL import Image

        assert self._output_dir is not None
        for path in drawn_figures(self._output_dir):
            with Image.open(path) as image:
                pixels = np.asarray(image.convert("RGB"))
            self._logger.experiment.add_image(
                f"figures/{path.stem}", pixels, self._last_round, dataformats="HWC"
            )
        self._logger.finalize("success")
