"""The FedAvg tutorial's cyclic learning rate (§2.3): Smith's `triangular` policy, one step per
round (Smith, "Cyclical Learning Rates for Training Neural Networks", WACV 2017).

With L = `cycle_length` and p = (r − 1) mod L in round r, the rate climbs linearly from the low
to the high rate over the first L/2 rounds of each cycle and back over the second half: rounds 1,
1 + L, … get the low rate, rounds 1 + L/2, … the high one. By default low = base_lr and
high = 2·base_lr, the tutorial's base → 2·base → base. (Its snippet's second half,
base·(2 − p/(L/2)), drops from 2·base to base at p = L/2 and then to ~0: that shape is
`lr_schedule=cyclic_decay`; this one is the shape the text describes.) `min_lr`/`max_lr` give
absolute bounds instead, Smith's base_lr and max_lr, for every parameter group alike.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from fedlight.core.context import RoundContext
from fedlight.core.errors import ConfigError, require
from fedlight.loggers.base import MetricsRow
from fedlight.lr_schedules.base import CyclicSchedule


@dataclass
class Cyclic(CyclicSchedule):
    min_lr: float | None = None  # None: base_lr
    max_lr: float | None = None  # None: 2·base_lr

    def __post_init__(self) -> None:
        super().__post_init__()
        if (self.min_lr is None) != (self.max_lr is None):
            given, missing = ("min_lr", "max_lr") if self.max_lr is None else ("max_lr", "min_lr")
            raise ConfigError(
                f"lr_schedule.{given}={getattr(self, given)} needs lr_schedule.{missing} too: give "
                "both (the triangular form between them) or neither (base → 2·base → base)"
            )
        if self.min_lr is not None and self.max_lr is not None:
            require(self.min_lr > 0, f"lr_schedule.min_lr={self.min_lr} must be > 0")
            require(
                self.max_lr >= self.min_lr,
                f"lr_schedule.max_lr={self.max_lr} must be >= lr_schedule.min_lr={self.min_lr}",
            )

    def __call__(
        self, ctx: RoundContext, base_lr: float, evaluations: Sequence[MetricsRow]
    ) -> float:
        low = base_lr if self.min_lr is None else self.min_lr
        high = 2 * base_lr if self.max_lr is None else self.max_lr
        position, half = self.place(ctx)
        return low + (high - low) * (1 - abs(position / half - 1))
