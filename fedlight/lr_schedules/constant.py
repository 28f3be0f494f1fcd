"""The same local learning rate in every round."""

from dataclasses import dataclass


@dataclass
class Constant:
    def __call__(self, round_index: int, base_lr: float) -> float:
        return base_lr
