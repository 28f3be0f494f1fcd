"""The interface of a learning-rate schedule over rounds."""

from typing import Protocol

from fedlight.context import RoundContext


class LRSchedule(Protocol):
    def __call__(self, ctx: RoundContext, base_lr: float) -> float:
        """The clients' learning rate in round `ctx.round_index` for a group whose configured
        rate is `base_lr`."""
        ...
