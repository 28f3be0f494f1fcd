"""Bulyan of El Mhamdi et al., "The Hidden Vulnerability of Distributed Learning in Byzantium",
ICML 2018 (Section 4), over Krum."""

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from fedlight.aggregation.krum import ByzantineTolerant, krum_scores, pairwise_squared_distances
from fedlight.aggregation.median import coordinate_median


@dataclass
class Bulyan(ByzantineTolerant):
    """`aggregator=bulyan`: θ = n − 2f updates are selected one at a time by Krum over those not
    yet selected (scores recomputed on the remaining set, from one distance matrix); then each
    coordinate is the mean of the β = θ − 2f values of the selected updates closest to their
    coordinate-wise median (`coordinate_median`). Tolerates f Byzantine updates when n ≥ 4f + 3.

    Krum on r remaining updates scores by the r − f − 2 nearest others; where that is below one
    (the last selections when f ≤ 1, a case the paper leaves open) by the nearest one. Ties in
    the scores go to the first in participant order; values at equal distance from the median on
    both sides, where only some fit among the β, are taken from below the median first. Every
    update counts alike (the rule has no weights)."""

    factor: ClassVar[int] = 4

    def combine(self, updates: Tensor, weights: Tensor) -> Tensor:
        selected = updates[self.select(updates)]
        return closest_to_median_mean(selected, selected.shape[0] - 2 * self.f)

    def select(self, updates: Tensor) -> Tensor:
        """The indices of the θ = n − 2f updates Krum selects one after the other."""
        n = updates.shape[0]
        distances = pairwise_squared_distances(updates)
        remaining = torch.arange(n, device=updates.device)
        chosen = []
        for _ in range(n - 2 * self.f):
            r = remaining.numel()
            neighbours = max(r - self.f - 2, min(1, r - 1))
            scores = krum_scores(distances[remaining][:, remaining], neighbours)
            best = int(scores.argmin())
            chosen.append(remaining[best])
            remaining = torch.cat([remaining[:best], remaining[best + 1 :]])
        return torch.stack(chosen)


def closest_to_median_mean(rows: Tensor, beta: int) -> Tensor:
    """Per column of `rows` [θ, d], the mean of the `beta` values closest to the column's median.

    The β-th smallest distance is the radius; values strictly inside are kept, and the rest of
    the β come from those at the radius, below the median first (their mean per side stands for
    them: they are one value up to rounding)."""
    median = coordinate_median(rows)
    distance = (rows - median).abs()
    radius = distance.topk(beta, dim=0, largest=False).values[-1]
    inside = distance < radius
    tied = distance == radius
    below = tied & (rows < median)
    above = tied & ~below
    missing = beta - inside.sum(dim=0)
    count_below, count_above = below.sum(dim=0), above.sum(dim=0)
    take_below = torch.minimum(count_below, missing)
    take_above = missing - take_below
    total = torch.where(inside, rows, 0).sum(dim=0)
    total += take_below * torch.where(below, rows, 0).sum(dim=0) / count_below.clamp(min=1)
    total += take_above * torch.where(above, rows, 0).sum(dim=0) / count_above.clamp(min=1)
    return total / beta
