"""Norm clipping of Sun et al., "Can You Really Backdoor Federated Learning?", 2019 (Section 4,
"norm thresholding of updates"): the weighted mean of the updates, each clipped to norm M."""

from dataclasses import dataclass

import torch

from fedlight.aggregation.base import Accumulator, Aggregator
from fedlight.aggregation.mean import RunningMean
from fedlight.core.errors import require
from fedlight.core.tensors import StateDict


class ClippedMean(RunningMean):
    """`RunningMean` of the updates scaled by min(1, M / ‖u‖₂), the norm over the whole update:
    the scale folds into the update's weight, so nothing is held or copied and partial sums of
    workers (`fl.exchange=sums`) merge as the mean's do."""

    def __init__(self, total_weight: float, max_norm: float) -> None:
        super().__init__(total_weight)
        self.max_norm = max_norm

    def add(self, update: StateDict, weight: float) -> None:
        norm = float(
            torch.linalg.vector_norm(
                torch.stack(
                    [torch.linalg.vector_norm(t, dtype=torch.float64) for t in update.values()]
                )
            )
        )
        scale = min(1.0, self.max_norm / norm) if norm > 0 else 1.0
        super().add(update, weight * scale)


@dataclass
class NormClip(Aggregator):
    """`aggregator=norm_clip`: the weighted mean (`aggregator.weighting`) of the updates, each
    first scaled down to norm `max_norm` if longer; bounds what one (backdooring) client can move
    the model, at the price of shrinking honest updates longer than M."""

    max_norm: float = 1.0  # M: the largest update norm kept as it is

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            self.max_norm > 0,
            f"aggregator.max_norm={self.max_norm} is the clipping norm M and must be > 0; use "
            "e.g. aggregator.max_norm=1.0",
        )

    def accumulator(self, total_weight: float, count: int) -> Accumulator:
        return ClippedMean(total_weight, self.max_norm)
