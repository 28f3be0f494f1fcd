"""FedAdagrad (Reddi et al., ICLR 2021), kept as a shortcut: `algo=fedadagrad` is `algo=fedavg
server_opt=adagrad` with its hyperparameters under `algo.*`. The rule is in
`fedlight.server_opt.adagrad`."""

from dataclasses import dataclass, field
from typing import ClassVar

from fedlight.algorithms.fedadam import require_adaptive
from fedlight.algorithms.fedavg import FedAvg
from fedlight.algorithms.fedavgm import SHORTCUT
from fedlight.server_opt.adagrad import Adagrad
from fedlight.server_opt.base import ServerOptimizer


@dataclass
class FedAdagrad(FedAvg):
    server_lr: float | None = 0.1
    beta1: float = 0.9
    tau: float = 1e-3
    server_opt: ServerOptimizer | None = field(default=None, init=False)

    fixed_server: ClassVar[str | None] = SHORTCUT

    def default_server_opt(self) -> ServerOptimizer:
        require_adaptive(self.beta1, self.tau)
        assert self.server_lr is not None
        return Adagrad(lr=self.server_lr, beta1=self.beta1, tau=self.tau)
