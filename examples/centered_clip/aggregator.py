"""Centered clipping (Karimireddy, He and Jaggi, "Learning from History for Byzantine Robust
Optimization", ICML 2021, Eq. 2) as an aggregator of one's own (docs/howto/add-aggregator.md).

    v ← v + (1/n) Σ_i (x_i − v) · min(1, τ / ‖x_i − v‖₂),   repeated `iterations` times.

Each update pulls the centre v by at most τ/n per iteration, however far away it is, so a few
Byzantine updates cannot drag the aggregate far while honest updates near v count in full. The
paper starts v at the previous round's aggregate (its server momentum); here every round starts
at the coordinate-wise median, so the rule keeps no state across rounds.
"""

from dataclasses import dataclass

import torch
from torch import Tensor

from fedlight import RobustAggregator, require


@dataclass
class CenteredClip(RobustAggregator):
    weighting: str = "uniform"  # the rule treats every update alike (samples is refused)
    tau: float = 1.0  # τ: the radius around the centre within which an update counts in full
    iterations: int = 3  # L

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.tau > 0, f"aggregator.tau={self.tau} must be > 0 (the clipping radius)")
        require(self.iterations >= 1, f"aggregator.iterations={self.iterations} must be >= 1")

    def combine(self, updates: Tensor, weights: Tensor) -> Tensor:
        """The centre after `iterations` clipped steps from the median of the rows [n, d]."""
        centre = updates.median(dim=0).values
        for _ in range(self.iterations):
            offsets = updates - centre
            norms = torch.linalg.vector_norm(offsets, dim=1, keepdim=True)
            # τ/0 is inf: an update at the centre is kept as it is (its offset is 0 anyway)
            centre = centre + (offsets * (self.tau / norms).clamp(max=1.0)).mean(dim=0)
        return centre
