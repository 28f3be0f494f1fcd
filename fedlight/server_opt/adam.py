"""Server Adam (FedAdam), Reddi et al., "Adaptive Federated Optimization", ICLR 2021, Algorithm 2:
    m_t = β1 m + (1 − β1) Δ,  v_t = β2 v + (1 − β2) Δ²,  x ← x + η m_t / (√v_t + τ),  v_0 = τ².
Defaults β1 = 0.9, β2 = 0.99 (the paper's); η = 0.01, τ = 1e-3 inside its tuning grids.

Reference variants: `initial_v=zero` starts v at 0 (Flower's `FedAdam` strategy, optax);
`bias_correction=true` divides the moments by (1 − β^t) at the t-th server update before the step,
x ← x + η m̂_t / (√v̂_t + τ), τ outside the square root (optax's `adam` with eps = τ, eps_root =
0, which fedjax's server optimizers use); the step count is a slot of its own (`t/<parameter>`).
"""

from dataclasses import dataclass

import torch
from torch import Tensor

from fedlight.config import require
from fedlight.server_opt.base import AdaptiveServerOptimizer, Slots


@dataclass
class Adam(AdaptiveServerOptimizer):
    beta2: float = 0.99
    bias_correction: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        require(0 <= self.beta2 < 1, f"server_opt.beta2={self.beta2} must be in [0, 1)")
        if self.bias_correction:  # the update count t, kept beside m and v
            self.slots = (*type(self).slots, "t")

    def second_moment(self, v: Tensor, delta_sq: Tensor) -> Tensor:
        return self.beta2 * v + (1 - self.beta2) * delta_sq

    def initial_slot(self, slot: str, param: Tensor) -> Tensor:
        if slot == "t":
            return torch.zeros((), dtype=torch.float64, device=param.device)
        return super().initial_slot(slot, param)

    def direction(self, delta: Tensor, state: Slots) -> tuple[Tensor, Slots]:
        if not self.bias_correction:
            return super().direction(delta, state)
        m = self.beta1 * state["m"] + (1 - self.beta1) * delta
        v = self.second_moment(state["v"], delta * delta)
        t = state["t"] + 1
        m_hat = m / (1 - self.beta1 ** t.item())
        v_hat = v / (1 - self.beta2 ** t.item())
        return m_hat / (v_hat.sqrt() + self.tau), {"m": m, "v": v, "t": t}
