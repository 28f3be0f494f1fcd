"""The same local learning rate in every round."""

from collections.abc import Sequence
from dataclasses import dataclass

from fedlight.core.context import RoundContext
from fedlight.loggers.base import MetricsRow
from fedlight.lr_schedules.base import LRSchedule


@dataclass
class Constant(LRSchedule):
    def __call__(
        self, ctx: RoundContext, base_lr: float, evaluations: Sequence[MetricsRow]
    ) -> float:
        return base_lr
