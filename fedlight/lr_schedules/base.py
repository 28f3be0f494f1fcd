"""The interface of a learning-rate schedule over rounds."""

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.loggers.base import MetricsRow


class LRSchedule(ABC):
    """The `lr_schedule` config group: the clients' local learning rate in each round."""

    # True where the rate depends on the run's total rounds (`ctx.federation.rounds`, e.g. a cosine
    # horizon): such a run cannot be extended by a resume with more `fl.rounds`.
    depends_on_total_rounds: ClassVar[bool] = False
    # True where the rate depends on the server's evaluations (`evaluations`, e.g. a plateau): it
    # is known only as the run goes, so no model scheduler composes with it and the workers that
    # evaluate nothing take the main worker's rate.
    reads_evaluations: ClassVar[bool] = False

    @abstractmethod
    def __call__(
        self, ctx: RoundContext, base_lr: float, evaluations: Sequence[MetricsRow]
    ) -> float:
        """The clients' learning rate in round `ctx.round_index` (1-based) for a parameter group
        whose configured rate is `base_lr`, given the rows of the rounds evaluated so far, oldest
        first (metrics.csv's rows of the evaluated rounds: a function of them, not a state of its
        own, replays from a checkpoint's rows on resume)."""


@dataclass
class CyclicSchedule(LRSchedule, ABC):
    """A rate that repeats every `cycle_length` rounds (`cyclic`, `cyclic_decay`: Smith,
    "Cyclical Learning Rates for Training Neural Networks", WACV 2017): one check of L and one
    reading of where a round falls in its cycle."""

    cycle_length: int = 100  # L: rounds per cycle, the FedAvg tutorial's 100

    def __post_init__(self) -> None:
        require(
            self.cycle_length >= 2,
            f"lr_schedule.cycle_length={self.cycle_length} must be >= 2 (rounds per cycle); use "
            "e.g. lr_schedule.cycle_length=100",
        )

    def place(self, ctx: RoundContext) -> tuple[int, float]:
        """p = (r − 1) mod L in round r (0 in rounds 1, 1 + L, …) and the half cycle h = L/2."""
        return (ctx.round_index - 1) % self.cycle_length, self.cycle_length / 2
