"""Coordinate-wise β-trimmed mean of Yin et al., "Byzantine-Robust Distributed Learning: Towards
Optimal Statistical Rates", ICML 2018 (Definition 2)."""

import math
from dataclasses import dataclass

from torch import Tensor

from fedlight.aggregation.robust_base import RobustAggregator
from fedlight.core.errors import require


@dataclass
class TrimmedMean(RobustAggregator):
    """`aggregator=trimmed_mean`: per coordinate, the k = ⌊β·n⌋ largest and the k smallest values
    of the n updates are removed and the other n − 2k averaged; tolerates up to k Byzantine
    updates. β < 1/2 leaves at least one value for every n, so no round is refused. Every update
    counts alike (the paper's rule has no weights)."""

    weighting: str = "uniform"
    beta: float = 0.1  # the fraction trimmed on each side

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            0 <= self.beta < 0.5,
            f"aggregator.beta={self.beta} is the fraction trimmed per side and must be in "
            "[0, 0.5); use e.g. aggregator.beta=0.1",
        )

    def combine(self, updates: Tensor, weights: Tensor) -> Tensor:
        n = updates.shape[0]
        k = math.floor(self.beta * n)
        # With lo and hi the smallest and largest kept values of a coordinate, clamping into
        # [lo, hi] turns the k trimmed values of each side into k copies of lo and of hi; what
        # is summed stays within the kept range, so an outlier of 1e30 costs no precision.
        lo = updates.topk(k + 1, dim=0, largest=False).values[k]
        hi = updates.topk(k + 1, dim=0).values[k]
        kept_sum = updates.clamp(min=lo, max=hi).sum(dim=0) - k * (lo + hi)
        return kept_sum / (n - 2 * k)
