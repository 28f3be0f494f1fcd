"""The same local learning rate in every round."""

from dataclasses import dataclass

from fedlight.context import RoundContext


@dataclass
class Constant:
    def __call__(self, ctx: RoundContext, base_lr: float) -> float:
        return base_lr
