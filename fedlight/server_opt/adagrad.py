"""Server Adagrad (FedAdagrad), Reddi et al., "Adaptive Federated Optimization", ICLR 2021,
Algorithm 2 (with its momentum): v_t = v + Δ²; otherwise as Adam (v_0 = τ²). v only grows, so
steps shrink over rounds; hence the larger default η = 0.1. β1 = 0 is plain Adagrad.
"""

from dataclasses import dataclass

from torch import Tensor

from fedlight.server_opt.base import AdaptiveServerOptimizer


@dataclass
class Adagrad(AdaptiveServerOptimizer):
    lr: float = 0.1

    def second_moment(self, v: Tensor, delta_sq: Tensor) -> Tensor:
        return v + delta_sq
