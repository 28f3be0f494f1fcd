"""Server Adam (FedAdam), Reddi et al., "Adaptive Federated Optimization", ICLR 2021, Algorithm 2:
    m_t = β1 m + (1 − β1) Δ,  v_t = β2 v + (1 − β2) Δ²,  x ← x + η m_t / (√v_t + τ),  v_0 = τ².
Defaults β1 = 0.9, β2 = 0.99 (the paper's); η = 0.01, τ = 1e-3 inside its tuning grids.

Reference variants (`variant` fills `initial_v` and `bias_correction` where left null):
- `paper` (default): v starts at τ², no bias correction, as above.
- `optax` (fedjax's server optimizers use optax's `adam`, eps = τ, eps_root = 0): v starts at 0,
  `bias_correction=moments`: x ← x + η m̂_t / (√v̂_t + τ), m̂ = m/(1 − β1^t), v̂ = v/(1 − β2^t).
- `flower` (Flower's `FedAdam`, framework/py/flwr/server/strategy/fedadam.py): v starts at 0,
  `bias_correction=flower`: the step size η √(1 − β2^(t+1)) / (1 − β1^(t+1)) times m_t / (√v_t + τ),
  Kingma & Ba's α_t form with the exponent one ahead of the update count t (Flower's round
  numbers start at 1), τ on the uncorrected √v_t. Flower's older FedAdam (src/py/flwr/server/
  strategy/fedadam.py) has neither correction: `initial_v=zero bias_correction=none`.
With a correction the update count t is a slot of its own (`t/<parameter>`).
"""

from dataclasses import dataclass

import torch
from torch import Tensor

from fedlight.core.errors import require
from fedlight.core.variants import VariantTable, fill_from_variant
from fedlight.server_opt.base import AdaptiveServerOptimizer, Slots

VARIANTS: VariantTable = {
    "paper": {"initial_v": "tau_squared", "bias_correction": "none"},
    "optax": {"initial_v": "zero", "bias_correction": "moments"},
    "flower": {"initial_v": "zero", "bias_correction": "flower"},
}


@dataclass
class Adam(AdaptiveServerOptimizer):
    beta2: float = 0.99
    variant: str = "paper"  # paper | optax | flower
    initial_v: str | None = None  # type: ignore[assignment]  # None: the variant's
    bias_correction: str | None = None  # none | moments | flower; None: the variant's

    def __post_init__(self) -> None:
        fill_from_variant(self, "server_opt.variant", VARIANTS)
        super().__post_init__()
        require(0 <= self.beta2 < 1, f"server_opt.beta2={self.beta2} must be in [0, 1)")
        require(
            self.bias_correction in ("none", "moments", "flower"),
            f"server_opt.bias_correction={self.bias_correction} is not a bias correction; use "
            "none (the paper's), moments (optax's) or flower (Flower's step size)",
        )
        if self.bias_correction != "none":  # the update count t, kept beside m and v
            self.slots = (*type(self).slots, "t")

    def second_moment(self, v: Tensor, delta_sq: Tensor) -> Tensor:
        return self.beta2 * v + (1 - self.beta2) * delta_sq

    def initial_slot(self, slot: str, param: Tensor) -> Tensor:
        if slot == "t":
            return torch.zeros((), dtype=torch.float64, device=param.device)
        return super().initial_slot(slot, param)

    def direction(self, delta: Tensor, state: Slots) -> tuple[Tensor, Slots]:
        if self.bias_correction == "none":
            return super().direction(delta, state)
        m, v = self.moments(delta, state)
        t = state["t"] + 1
        count = t.item()
        if self.bias_correction == "moments":
            m_hat = m / (1 - self.beta1**count)
            v_hat = v / (1 - self.beta2**count)
            return m_hat / (v_hat.sqrt() + self.tau), {"m": m, "v": v, "t": t}
        step = (1 - self.beta2 ** (count + 1)) ** 0.5 / (1 - self.beta1 ** (count + 1))
        return step * m / (v.sqrt() + self.tau), {"m": m, "v": v, "t": t}
