"""FedAvgM: FedAvg with server momentum (Hsu et al. 2019), kept as a shortcut: `algo=fedavgm` is
`algo=fedavg server_opt=momentum` with its hyperparameters under `algo.*`, so existing commands
give the same numbers. The rule is in `fedlight.server_opt.momentum`."""

from dataclasses import dataclass, field
from typing import ClassVar

from fedlight.algorithms.fedavg import FedAvg
from fedlight.core.errors import require
from fedlight.server_opt.base import ServerOptimizer
from fedlight.server_opt.momentum import Momentum

SHORTCUT = "it is FedAvg with its own server optimizer; use algo=fedavg server_opt=<option>"


@dataclass
class FedAvgM(FedAvg):
    server_lr: float | None = 1.0  # η:  m ← β m + Δ;  x ← x + η m
    server_momentum: float = 0.9  # β
    server_opt: ServerOptimizer | None = field(default=None, init=False)

    fixed_server: ClassVar[str | None] = SHORTCUT

    def default_server_opt(self) -> ServerOptimizer:
        require(
            0 <= self.server_momentum < 1,
            f"algo.server_momentum={self.server_momentum} must be in [0, 1)",
        )
        assert self.server_lr is not None
        return Momentum(lr=self.server_lr, momentum=self.server_momentum)
