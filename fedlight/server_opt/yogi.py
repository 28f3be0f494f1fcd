"""Server Yogi (FedYogi), Reddi et al., "Adaptive Federated Optimization", ICLR 2021, Algorithm 2:
    v_t = v − (1 − β2) Δ² sign(v − Δ²); otherwise as Adam (no bias correction, v_0 = τ²).
v moves additively towards Δ², so it cannot collapse after one large round.
"""

from dataclasses import dataclass

import torch
from torch import Tensor

from fedlight.core.errors import require
from fedlight.server_opt.base import AdaptiveServerOptimizer


@dataclass
class Yogi(AdaptiveServerOptimizer):
    beta2: float = 0.99

    def __post_init__(self) -> None:
        super().__post_init__()
        require(0 <= self.beta2 < 1, f"server_opt.beta2={self.beta2} must be in [0, 1)")

    def second_moment(self, v: Tensor, delta_sq: Tensor) -> Tensor:
        return v - (1 - self.beta2) * delta_sq * torch.sign(v - delta_sq)
