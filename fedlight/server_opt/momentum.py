"""Server SGD with heavy-ball momentum: FedAvgM of Hsu et al., "Measuring the Effects of
Non-Identical Data Distribution for Federated Visual Classification", 2019; Reddi et al. 2021.

    m_t = β m_{t-1} + Δ_t,   x ← x + η m_t,   m_0 = 0   (no dampening).
In steady state the step is η/(1 − β) times plain SGD's, so lower η when raising β.
"""

from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor

from fedlight.core.errors import require
from fedlight.server_opt.base import ServerOptimizer, Slots


@dataclass
class Momentum(ServerOptimizer):
    momentum: float = 0.9  # β

    slots: ClassVar[tuple[str, ...]] = ("m",)

    def __post_init__(self) -> None:
        super().__post_init__()
        require(0 <= self.momentum < 1, f"server_opt.momentum={self.momentum} must be in [0, 1)")

    def direction(self, delta: Tensor, state: Slots) -> tuple[Tensor, Slots]:
        m = self.momentum * state["m"] + delta
        return m, {"m": m}
