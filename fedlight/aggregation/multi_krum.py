"""Multi-Krum of Blanchard et al., "Machine Learning with Adversaries: Byzantine Tolerant Gradient
Descent", NeurIPS 2017 (Section 5)."""

from dataclasses import dataclass

import torch
from torch import Tensor

from fedlight.aggregation.krum import ByzantineTolerant, krum_scores, pairwise_squared_distances
from fedlight.core.errors import require


@dataclass
class MultiKrum(ByzantineTolerant):
    """`aggregator=multi_krum`: the mean of the m updates with the lowest Krum scores (each the sum
    of squared distances to its n − f − 2 nearest other updates, computed once; ties: the first in
    participant order). The paper's mean is plain (`aggregator.weighting=uniform`); with another
    weighting the m selected updates are averaged with their clients' weights. Needs n ≥ 2f + 3
    and m ≤ n; m = 1 is Krum."""

    m: int | None = None  # updates averaged; None: n − f

    uses_weights = True

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            self.m is None or (isinstance(self.m, int) and self.m >= 1),
            f"aggregator.m={self.m} is the number of updates averaged and must be an integer "
            "≥ 1; use aggregator.m=null for n − f",
        )

    def selected(self, n: int) -> int:
        return n - self.f if self.m is None else self.m

    def refusal(self, n: int) -> str | None:
        if self.selected(n) > n:
            return f"aggregator=multi_krum needs m ≤ n updates (m={self.m}), got {n}"
        return super().refusal(n)

    def combine(self, updates: Tensor, weights: Tensor) -> Tensor:
        n = updates.shape[0]
        scores = krum_scores(pairwise_squared_distances(updates), n - self.f - 2)
        chosen = scores.sort(stable=True).indices[: self.selected(n)]
        share = torch.zeros_like(weights)  # zero for the others: no copy of the chosen rows
        share[chosen] = weights[chosen] / weights[chosen].sum()
        return share.to(updates.dtype) @ updates
