"""FedYogi (Reddi et al., ICLR 2021), kept as a shortcut: `algo=fedyogi` is `algo=fedavg
server_opt=yogi` with its hyperparameters under `algo.*`. The rule is in
`fedlight.server_opt.yogi`."""

from dataclasses import dataclass, field
from typing import ClassVar

from fedlight.algorithms.fedadam import require_adaptive
from fedlight.algorithms.fedavg import FedAvg
from fedlight.algorithms.fedavgm import SHORTCUT
from fedlight.server_opt.base import ServerOptimizer
from fedlight.server_opt.yogi import Yogi


@dataclass
class FedYogi(FedAvg):
    server_lr: float | None = 0.01
    beta1: float = 0.9
    beta2: float = 0.99
    tau: float = 1e-3
    server_opt: ServerOptimizer | None = field(default=None, init=False)

    fixed_server: ClassVar[str | None] = SHORTCUT

    def default_server_opt(self) -> ServerOptimizer:
        require_adaptive(self.beta1, self.tau, self.beta2)
        assert self.server_lr is not None
        return Yogi(lr=self.server_lr, beta1=self.beta1, beta2=self.beta2, tau=self.tau)
