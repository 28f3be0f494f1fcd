"""The interface of a learning-rate schedule over rounds."""

from abc import ABC, abstractmethod
from typing import ClassVar

from fedlight.core.context import RoundContext


class LRSchedule(ABC):
    """The `lr_schedule` config group: the clients' local learning rate in each round."""

    # True where the rate depends on the run's total rounds (`ctx.federation.rounds`, e.g. a cosine
    # horizon): such a run cannot be extended by a resume with more `fl.rounds`.
    depends_on_total_rounds: ClassVar[bool] = False

    @abstractmethod
    def __call__(self, ctx: RoundContext, base_lr: float) -> float:
        """The clients' learning rate in round `ctx.round_index` (1-based) for a parameter group
        whose configured rate is `base_lr`."""
