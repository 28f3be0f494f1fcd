"""FedAdam of Reddi et al., "Adaptive Federated Optimization", ICLR 2021 (Algorithm 2).

Server Adam on the sample-weighted mean delta Δ_t, without bias correction:
    m_t = β1 m_{t-1} + (1 − β1) Δ_t,   v_t = β2 v_{t-1} + (1 − β2) Δ_t²,
    x ← x + η m_t / (√v_t + τ),        m_0 = 0, v_0 = τ².
Defaults: β1 = 0.9, β2 = 0.99 as in the paper's experiments; η = 0.01 and τ = 1e-3, values inside
the paper's tuning grids (η and τ are tuned per task there). τ bounds the per-coordinate step by
η |m| / τ, so a larger τ makes the method closer to FedAvgM.
"""

from dataclasses import dataclass

from torch import Tensor

from fedlight.algorithms.server_optimizers import AdaptiveServerOptimizer, require_beta2


@dataclass
class FedAdam(AdaptiveServerOptimizer):
    beta2: float = 0.99

    def __post_init__(self) -> None:
        super().__post_init__()
        require_beta2(self.beta2)

    def second_moment(self, v: Tensor, delta_sq: Tensor) -> Tensor:
        return self.beta2 * v + (1 - self.beta2) * delta_sq
