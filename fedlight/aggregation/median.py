"""Coordinate-wise median of Yin et al., "Byzantine-Robust Distributed Learning: Towards Optimal
Statistical Rates", ICML 2018 (Definition 1)."""

from dataclasses import dataclass

import torch
from torch import Tensor

from fedlight.aggregation.robust_base import RobustAggregator


def coordinate_median(rows: Tensor) -> Tensor:
    """The median of each column of `rows` [n, d]; for even n the mean of the two middle values
    (the paper's "median" leaves it open; this is the usual one, and symmetric in the updates)."""
    n = rows.shape[0]
    lower = rows.median(dim=0).values  # torch: the lower of the two middle values for even n
    if n % 2:
        return lower
    # The (n/2 + 1)-th smallest: `lower` again if it is repeated past the middle, else the
    # smallest value above it (one pass instead of a second selection).
    repeated = (rows <= lower).sum(dim=0) > n // 2
    above = torch.where(rows > lower, rows, torch.inf).amin(dim=0)
    upper = torch.where(repeated, lower, above)
    return (lower + upper) / 2


@dataclass
class Median(RobustAggregator):
    """`aggregator=median`: each coordinate of the aggregate is the median of that coordinate over
    the round's updates; robust while fewer than half of the updates are Byzantine. Every update
    counts alike (the paper's rule has no weights)."""

    weighting: str = "uniform"

    def combine(self, updates: Tensor, weights: Tensor) -> Tensor:
        return coordinate_median(updates)
