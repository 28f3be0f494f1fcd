"""The interface of a learning-rate schedule over rounds."""

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from fedlight.core.context import RoundContext
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
