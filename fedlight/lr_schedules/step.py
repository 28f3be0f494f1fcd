"""Step decay: base·gamma^⌊(r − 1)/step_rounds⌋ in round r, the staircase of He et al. (ResNet,
CVPR 2016) counted in rounds. Under non-IID data FedAvg with a fixed rate settles away from the
optimum; a decaying rate is needed to reach it (Li et al., "On the Convergence of FedAvg on
Non-IID Data", ICLR 2020).

Default: halve every 30 rounds. ResNet's × 0.1 suits hundreds of epochs; a federated run has tens
to hundreds of rounds, and × 0.1 twice would leave most of it at 1% of the rate.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.loggers.base import MetricsRow
from fedlight.lr_schedules.base import LRSchedule


@dataclass
class Step(LRSchedule):
    gamma: float = 0.5  # factor per step
    step_rounds: int = 30  # rounds between steps

    def __post_init__(self) -> None:
        require(0 < self.gamma <= 1, f"lr_schedule.gamma={self.gamma} must be in (0, 1]")
        require(self.step_rounds >= 1, f"lr_schedule.step_rounds={self.step_rounds} must be >= 1")

    def __call__(
        self, ctx: RoundContext, base_lr: float, evaluations: Sequence[MetricsRow]
    ) -> float:
        return base_lr * self.gamma ** ((ctx.round_index - 1) // self.step_rounds)
