"""Server SGD: x ← x + η Δ. With η = 1 this is FedAvg's model average (McMahan et al. 2017);
other η are the server learning rate of Reddi et al., ICLR 2021."""

from dataclasses import dataclass

from torch import Tensor

from fedlight.server_opt.base import ServerOptimizer, Slots


@dataclass
class SGD(ServerOptimizer):
    def direction(self, delta: Tensor, state: Slots) -> tuple[Tensor, Slots]:
        return delta, {}
