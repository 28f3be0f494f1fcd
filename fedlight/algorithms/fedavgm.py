"""FedAvgM: FedAvg with server momentum, Hsu et al., "Measuring the Effects of Non-Identical Data
Distribution for Federated Visual Classification", 2019, as the server-SGD-with-momentum instance
of Reddi et al., "Adaptive Federated Optimization", ICLR 2021.

Form implemented (heavy ball, no dampening, on the sample-weighted mean delta Δ_t):
    m_t = β m_{t-1} + Δ_t,   x ← x + η m_t,   m_0 = 0.
In steady state the step is η/(1 − β) times FedAvg's, so lower η when raising β. β = 0 is FedAvg
with server learning rate η. Buffers take the plain mean delta, as in FedAvg.
"""

from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor

from fedlight.algorithms.server_optimizers import ServerOptimizer, Slots
from fedlight.config import require


@dataclass
class FedAvgM(ServerOptimizer):
    server_momentum: float = 0.9  # β

    slots: ClassVar[tuple[str, ...]] = ("m",)

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            0 <= self.server_momentum < 1,
            f"algo.server_momentum={self.server_momentum} must be in [0, 1)",
        )

    def direction(self, delta: Tensor, state: Slots) -> tuple[Tensor, Slots]:
        m = self.server_momentum * state["m"] + delta
        return m, {"m": m}
