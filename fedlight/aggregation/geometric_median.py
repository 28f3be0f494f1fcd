"""The geometric median of RFA, Pillutla et al., "Robust Aggregation for Federated Learning", IEEE
Transactions on Signal Processing 2022 (Algorithm 2, the smoothed Weiszfeld algorithm)."""

from dataclasses import dataclass

import torch
from torch import Tensor

from fedlight.aggregation.robust_base import RobustAggregator
from fedlight.core.errors import require


@dataclass
class GeometricMedian(RobustAggregator):
    """`aggregator=geometric_median`: an approximate minimizer v of Σ α_i ‖v − x_i‖ with α_i the
    clients' weights, robust while the Byzantine updates hold less than half of the total weight.

    Smoothed Weiszfeld from the weighted mean: v ← Σ β_i x_i / Σ β_i with
    β_i = α_i / max(ν, ‖v − x_i‖), at most `max_iterations` times, stopping early once the
    objective decreases by less than `tolerance` of its value (as RFA's reference code). The
    distances are float32 norms; the weights β_i, the objective and the stopping test float64."""

    nu: float = 1e-6  # ν > 0: the smoothing, a floor on the distances (an update at v)
    max_iterations: int = 10  # Weiszfeld steps at most
    tolerance: float = 1e-5  # stop when the objective's relative decrease is below it

    uses_weights = True

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            self.nu > 0,
            f"aggregator.nu={self.nu} is the smoothing of the distances and must be > 0; "
            "use e.g. aggregator.nu=1e-6",
        )
        require(
            isinstance(self.max_iterations, int) and self.max_iterations >= 1,
            f"aggregator.max_iterations={self.max_iterations} must be an integer ≥ 1; use e.g. "
            "aggregator.max_iterations=10",
        )
        require(
            self.tolerance >= 0,
            f"aggregator.tolerance={self.tolerance} must be ≥ 0 (0: until it no longer "
            "decreases); use e.g. aggregator.tolerance=1e-5",
        )

    def combine(self, updates: Tensor, weights: Tensor) -> Tensor:
        median = weighted_mean(updates, weights)
        distances = distances_to(updates, median)
        objective = float(weights @ distances)
        for _ in range(self.max_iterations):
            median = weighted_mean(updates, weights / distances.clamp(min=self.nu))
            distances = distances_to(updates, median)
            previous, objective = objective, float(weights @ distances)
            if previous - objective <= self.tolerance * objective:
                break
        return median


def weighted_mean(rows: Tensor, weights: Tensor) -> Tensor:
    return (weights / weights.sum()).to(rows.dtype) @ rows


def distances_to(rows: Tensor, point: Tensor) -> Tensor:
    """‖x_i − point‖ for each row, float64."""
    return torch.linalg.vector_norm(rows - point, dim=1).to(torch.float64)
