"""FedAdagrad of Reddi et al., "Adaptive Federated Optimization", ICLR 2021 (Algorithm 2).

Server Adagrad (with Algorithm 2's momentum) on the sample-weighted mean delta Δ_t:
    m_t = β1 m_{t-1} + (1 − β1) Δ_t,   v_t = v_{t-1} + Δ_t²,
    x ← x + η m_t / (√v_t + τ),        m_0 = 0, v_0 = τ².
v only grows, so steps shrink over rounds; hence a larger default η = 0.1 than FedAdam/FedYogi.
Defaults: β1 = 0.9 (the paper's), τ = 1e-3 (inside its tuning grid); β1 = 0 is plain Adagrad.
"""

from dataclasses import dataclass

from torch import Tensor

from fedlight.algorithms.server_optimizers import AdaptiveServerOptimizer


@dataclass
class FedAdagrad(AdaptiveServerOptimizer):
    server_lr: float = 0.1

    def second_moment(self, v: Tensor, delta_sq: Tensor) -> Tensor:
        return v + delta_sq
