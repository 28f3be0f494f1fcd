"""FedAdam (Reddi et al., ICLR 2021), kept as a shortcut: `algo=fedadam` is `algo=fedavg
server_opt=adam` with its hyperparameters under `algo.*`, so existing commands give the same
numbers. The rule is in `fedlight.server_opt.adam`."""

from dataclasses import dataclass, field
from typing import ClassVar

from fedlight.algorithms.fedavg import FedAvg
from fedlight.algorithms.fedavgm import SHORTCUT
from fedlight.core.errors import require
from fedlight.server_opt.adam import Adam
from fedlight.server_opt.base import ServerOptimizer


def require_adaptive(beta1: float, tau: float, beta2: float = 0.0) -> None:
    """The checks of the adaptive server optimizers, naming the shortcuts' `algo.*` keys."""
    require(0 <= beta1 < 1, f"algo.beta1={beta1} must be in [0, 1)")
    require(0 <= beta2 < 1, f"algo.beta2={beta2} must be in [0, 1)")
    require(tau > 0, f"algo.tau={tau} must be > 0 (e.g. 1e-3)")


@dataclass
class FedAdam(FedAvg):
    server_lr: float | None = 0.01  # η
    beta1: float = 0.9
    beta2: float = 0.99
    tau: float = 1e-3  # adaptivity τ; v starts at τ²
    server_opt: ServerOptimizer | None = field(default=None, init=False)

    fixed_server: ClassVar[str | None] = SHORTCUT

    def default_server_opt(self) -> ServerOptimizer:
        require_adaptive(self.beta1, self.tau, self.beta2)
        assert self.server_lr is not None
        return Adam(lr=self.server_lr, beta1=self.beta1, beta2=self.beta2, tau=self.tau)
