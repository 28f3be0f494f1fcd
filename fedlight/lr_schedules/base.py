"""The interface of a learning-rate schedule over rounds."""

from typing import Protocol


class LRSchedule(Protocol):
    def __call__(self, round_index: int, base_lr: float) -> float: ...
