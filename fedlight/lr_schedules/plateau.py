"""Reduce on plateau, per round: PyTorch's ReduceLROnPlateau (threshold_mode 'rel') stepped once
per evaluation of the server's model, on `monitor` of its row. A client's local training produces
no monitored value (a model's own ReduceLROnPlateau is refused, `fedlight.engines.lightning`); the
server's evaluation does, once per evaluated round, so this is where the rule applies.

Round r trains at base·factor^k (floored at `min_lr`), k the reductions the evaluations before it
made: an evaluation improves on the best so far where its value lies below best·(1 − threshold)
(`mode=min`) or above best·(1 + threshold) (`max`); after more than `patience` evaluations in a row
without improvement the rate is multiplied by `factor` (a drop under torch's eps 1e-8 is skipped,
as there), and the `cooldown` evaluations after a reduction count none as bad. A round that was
not evaluated (`eval.every`) counts for nothing. Defaults are torch's.

The rate is recomputed from the evaluated rows each time it is asked, so a resumed run replays it
from the checkpoint's rows: no state of its own to save. Which columns an evaluated row has is
known only once one is in (a model's own test and validation names, the stages' metrics), so a
`monitor` the rows lack is refused after the first evaluated round.
"""

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

from fedlight.core.context import RoundContext
from fedlight.core.errors import ConfigError, require
from fedlight.loggers.base import SPLIT_LOSS, MetricsRow
from fedlight.lr_schedules.base import LRSchedule

EPS = 1e-8  # torch's: a reduction smaller than this leaves the rate as it is
MODES = ("min", "max")


@dataclass
class Plateau(LRSchedule):
    # a column of the evaluated rounds' rows; None: val_loss where the run has a validation set
    # (its rows have it), else test_loss
    monitor: str | None = None
    mode: str = "min"  # min: lower is better (a loss); max: higher (an accuracy)
    factor: float = 0.1  # the rate's factor per reduction
    patience: int = 10  # evaluations without improvement tolerated before a reduction
    threshold: float = 1e-4  # relative improvement that counts
    cooldown: int = 0  # evaluations after a reduction that count as no bad one
    min_lr: float = 0.0  # the floor, absolute

    reads_evaluations: ClassVar[bool] = True

    def __post_init__(self) -> None:
        require(self.mode in MODES, f"lr_schedule.mode={self.mode} is not a mode; use min or max")
        require(0 < self.factor < 1, f"lr_schedule.factor={self.factor} must be in (0, 1)")
        require(self.patience >= 0, f"lr_schedule.patience={self.patience} must be >= 0")
        require(self.threshold >= 0, f"lr_schedule.threshold={self.threshold} must be >= 0")
        require(self.cooldown >= 0, f"lr_schedule.cooldown={self.cooldown} must be >= 0")
        require(self.min_lr >= 0, f"lr_schedule.min_lr={self.min_lr} must be >= 0")

    def __call__(
        self, ctx: RoundContext, base_lr: float, evaluations: Sequence[MetricsRow]
    ) -> float:
        """torch's `step(metric)` over the evaluations so far, in their order; the rate is
        multiplied one reduction at a time, as torch does, so it is torch's to the bit."""
        lr, best = base_lr, math.inf if self.mode == "min" else -math.inf
        bad = cooling = 0
        for value in self.monitored(evaluations):
            if self.improves(value, best):
                best, bad = value, 0
            else:
                bad += 1
            if cooling:
                cooling, bad = cooling - 1, 0
            if bad > self.patience:
                reduced = max(lr * self.factor, self.min_lr)
                if lr - reduced > EPS:
                    lr = reduced
                cooling, bad = self.cooldown, 0
        return lr

    def improves(self, value: float, best: float) -> bool:
        """torch's `is_better` in threshold_mode 'rel' (NaN never improves)."""
        if self.mode == "min":
            return value < best * (1 - self.threshold)
        return value > best * (1 + self.threshold)

    def monitored(self, evaluations: Sequence[MetricsRow]) -> Iterator[float]:
        """The monitored value of each evaluated row; a monitor the rows lack is refused, naming
        the columns they have."""
        if not evaluations:
            return
        validation, test = SPLIT_LOSS["validation"], SPLIT_LOSS["test"]
        monitor = self.monitor or (validation if validation in evaluations[0] else test)
        for row in evaluations:
            if monitor not in row:
                raise ConfigError(
                    f"lr_schedule.monitor={monitor} is not a column of the evaluated rounds' rows "
                    f"(round {row['round']} has {', '.join(row)})"
                )
            yield float(row[monitor])
