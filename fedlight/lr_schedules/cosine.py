"""Cosine decay over the run's rounds (Loshchilov & Hutter, "SGDR", ICLR 2017, without restarts)
after an optional linear warmup (Goyal et al., "Accurate, Large Minibatch SGD", 2017).

With T = fl.rounds and W = `warmup_rounds`, round r ≤ W trains at base·r/W (round 1 is not wasted
at 0; round W reaches base) and round r > W at
    min_lr + (base − min_lr)·(1 + cos(π·(r − W − 1)/(T − W)))/2:
round W + 1 starts at base and the rate reaches the floor `min_lr` where the run ends, one round
after the last, so with the default floor 0 the last round still trains (PyTorch's
CosineAnnealingLR with T_max = T − W, stepped per round). The rate depends on T: a resume may not
change fl.rounds.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.loggers.base import MetricsRow
from fedlight.lr_schedules.base import LRSchedule


@dataclass
class Cosine(LRSchedule):
    warmup_rounds: int = 0  # W
    min_lr: float = 0.0  # the floor, absolute

    depends_on_total_rounds: ClassVar[bool] = True

    def __post_init__(self) -> None:
        require(
            self.warmup_rounds >= 0, f"lr_schedule.warmup_rounds={self.warmup_rounds} must be >= 0"
        )
        require(self.min_lr >= 0, f"lr_schedule.min_lr={self.min_lr} must be >= 0")

    def __call__(
        self, ctx: RoundContext, base_lr: float, evaluations: Sequence[MetricsRow]
    ) -> float:
        r, warmup = ctx.round_index, self.warmup_rounds
        if r <= warmup:
            return base_lr * r / warmup
        progress = (r - warmup - 1) / (ctx.federation.rounds - warmup)
        return self.min_lr + (base_lr - self.min_lr) * (1 + math.cos(math.pi * progress)) / 2
