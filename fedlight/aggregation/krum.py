"""Krum of Blanchard et al., "Machine Learning with Adversaries: Byzantine Tolerant Gradient
Descent", NeurIPS 2017 (Section 4), and the pairwise distances it and its relatives share."""

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from fedlight.aggregation.robust_base import RobustAggregator
from fedlight.core.errors import require


def pairwise_squared_distances(rows: Tensor) -> Tensor:
    """‖x_i − x_j‖² of the rows of `rows` [n, d] as an [n, n] float64 matrix with a zero diagonal,
    through one matrix product: D_ij = G_ii + G_jj − 2 G_ij with G = X Xᵀ. The rows are centered
    first (distances do not change under translation): without it, updates sharing a large common
    component would lose their differences to float32 cancellation. G is made exactly symmetric,
    so that D_ij = D_ji and equal scores tie exactly (Krum's tie rule then decides)."""
    centered = rows - rows.mean(dim=0)
    gram = (centered @ centered.T).to(torch.float64)
    gram = (gram + gram.T) / 2
    norms = gram.diagonal()
    distances = (norms[:, None] + norms[None, :] - 2 * gram).clamp_(min=0)
    return distances.fill_diagonal_(0)


def krum_scores(distances: Tensor, neighbours: int) -> Tensor:
    """Each row's score: the sum of its squared distances to its `neighbours` nearest other rows
    (of the square matrix `distances`)."""
    others = distances.clone().fill_diagonal_(torch.inf)
    return others.topk(neighbours, dim=1, largest=False).values.sum(dim=1)


def too_few(name: str, n: int, f: int, factor: int) -> str | None:
    """The refusal of a rule that needs n ≥ factor·f + 3 updates; None when n is enough."""
    needed = factor * f + 3
    if n >= needed:
        return None
    return f"aggregator={name} needs n ≥ {factor}f + 3 = {needed} updates (f={f}), got {n}"


@dataclass
class ByzantineTolerant(RobustAggregator):
    """A rule that tolerates `f` Byzantine updates a round when n ≥ factor·f + 3 (Krum and
    Multi-Krum: 2f + 3; Bulyan: 4f + 3)."""

    weighting: str = "uniform"
    f: int = 1  # Byzantine clients assumed per round

    factor: ClassVar[int] = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            isinstance(self.f, int) and not isinstance(self.f, bool) and self.f >= 0,
            f"aggregator.f={self.f} is the number of Byzantine clients assumed per round and "
            "must be an integer ≥ 0; use e.g. aggregator.f=1",
        )

    def refusal(self, n: int) -> str | None:
        return too_few(self.option, n, self.f, self.factor)


@dataclass
class Krum(ByzantineTolerant):
    """`aggregator=krum`: the one update with the lowest score, the sum of its squared distances
    to its n − f − 2 nearest other updates (ties: the first in participant order). Tolerates f
    Byzantine updates when n ≥ 2f + 3. Every update counts alike (the rule has no weights)."""

    def combine(self, updates: Tensor, weights: Tensor) -> Tensor:
        n = updates.shape[0]
        scores = krum_scores(pairwise_squared_distances(updates), n - self.f - 2)
        return updates[scores.argmin()].clone()
