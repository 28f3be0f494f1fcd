"""Server Adam (FedAdam), Reddi et al., "Adaptive Federated Optimization", ICLR 2021, Algorithm 2,
without bias correction:
    m_t = β1 m + (1 − β1) Δ,  v_t = β2 v + (1 − β2) Δ²,  x ← x + η m_t / (√v_t + τ),  v_0 = τ².
Defaults β1 = 0.9, β2 = 0.99 (the paper's); η = 0.01, τ = 1e-3 inside its tuning grids.
"""

from dataclasses import dataclass

from torch import Tensor

from fedlight.config import require
from fedlight.server_opt.base import AdaptiveServerOptimizer


@dataclass
class Adam(AdaptiveServerOptimizer):
    beta2: float = 0.99

    def __post_init__(self) -> None:
        super().__post_init__()
        require(0 <= self.beta2 < 1, f"server_opt.beta2={self.beta2} must be in [0, 1)")

    def second_moment(self, v: Tensor, delta_sq: Tensor) -> Tensor:
        return self.beta2 * v + (1 - self.beta2) * delta_sq
