"""The FedAvg tutorial's §2.3 cyclic learning rate as its snippet (`get_curr_lr`) computes it,
beside `cyclic`, the triangle its text describes (Smith, "Cyclical Learning Rates for Training
Neural Networks", WACV 2017).

With L = `cycle_length`, h = L/2 and p = (r − 1) mod L in round r (the snippet's 0-based
`comm_round`), the rate is base·(1 + p/h) while p < h and base·(2 − p/h) after: it climbs from
base to just under 2·base over the first half, falls back to base at p = h and then decays
linearly to base/h (about 0) in the cycle's last round, before the next cycle starts again at
base. The page lost the snippet's `<` and `+` signs; this reading is the one whose first half
rises, as the text says the rate does. `optim.lr` is the base, for every parameter group alike.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from fedlight.core.context import RoundContext
from fedlight.loggers.base import MetricsRow
from fedlight.lr_schedules.base import CyclicSchedule


@dataclass
class CyclicDecay(CyclicSchedule):
    def __call__(
        self, ctx: RoundContext, base_lr: float, evaluations: Sequence[MetricsRow]
    ) -> float:
        position, half = self.place(ctx)
        if position < half:
            return base_lr * (1 + position / half)
        return base_lr * (2 - position / half)
