"""Exponential decay: base·gamma^(r − 1) in round r, a decaying rate as FedAvg needs under non-IID
data (Li et al., "On the Convergence of FedAvg on Non-IID Data", ICLR 2020) without step_rounds to
tune. Default gamma 0.99 halves the rate about every 69 rounds (ln 2 / −ln 0.99).
"""

from collections.abc import Sequence
from dataclasses import dataclass

from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.loggers.base import MetricsRow
from fedlight.lr_schedules.base import LRSchedule


@dataclass
class Exponential(LRSchedule):
    gamma: float = 0.99  # factor per round

    def __post_init__(self) -> None:
        require(0 < self.gamma <= 1, f"lr_schedule.gamma={self.gamma} must be in (0, 1]")

    def __call__(
        self, ctx: RoundContext, base_lr: float, evaluations: Sequence[MetricsRow]
    ) -> float:
        return base_lr * self.gamma ** (ctx.round_index - 1)
