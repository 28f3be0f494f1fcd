"""FedYogi of Reddi et al., "Adaptive Federated Optimization", ICLR 2021 (Algorithm 2).

Server Yogi on the sample-weighted mean delta Δ_t, without bias correction:
    m_t = β1 m_{t-1} + (1 − β1) Δ_t,   v_t = v_{t-1} − (1 − β2) Δ_t² sign(v_{t-1} − Δ_t²),
    x ← x + η m_t / (√v_t + τ),        m_0 = 0, v_0 = τ².
Unlike Adam, v moves by an additive (1 − β2) Δ² towards Δ², so it cannot collapse after one large
round. Defaults: β1 = 0.9, β2 = 0.99 (the paper's), η = 0.01, τ = 1e-3 (inside its tuning grids).
"""

from dataclasses import dataclass

import torch
from torch import Tensor

from fedlight.algorithms.server_optimizers import AdaptiveServerOptimizer, require_beta2


@dataclass
class FedYogi(AdaptiveServerOptimizer):
    beta2: float = 0.99

    def __post_init__(self) -> None:
        super().__post_init__()
        require_beta2(self.beta2)

    def second_moment(self, v: Tensor, delta_sq: Tensor) -> Tensor:
        return v - (1 - self.beta2) * delta_sq * torch.sign(v - delta_sq)
