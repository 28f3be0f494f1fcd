"""FedProx of Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020
(Algorithm 2), with FedAvg's server (and so any aggregator and server optimizer).

Each client approximately minimizes h_k(w; x) = F_k(w) + μ/2 ‖w − x‖² around the global model x
it received. Server, by `algo.variant`: `fedlight` (default) is FedAvg's server, the
sample-weighted mean of the deltas under any selection (as NIID-Bench and Flower's niid_bench run
FedProx, and as the authors' code does: flearn/trainers/fedbase.py draws clients uniformly and
averages weighted by samples); `paper` is Algorithm 2 as the paper writes it: clients drawn ∝ n_k
(`selection=proportional`, required) and a plain mean of their updates.
Client: each selected client runs the local epochs `local_work` gives it (`local.epochs` by
default; `local_work=stragglers` is the paper's variable work, Section 5.2; no γ-inexactness
stopping rule), and the proximal term enters through its
gradient, p.grad += μ (p − x_p), added to every trainable parameter that has a gradient after
backpropagation, so any local optimizer (momentum, weight decay) sees the gradient of h_k. With
μ = 0 this is FedAvg exactly.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fedlight.aggregation.base import WEIGHTINGS, Part
from fedlight.algorithms.fedavg import BUFFERS, UPDATE, FedAvg
from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.core.tensors import StateDict
from fedlight.core.variants import VariantTable, fill_from_variant
from fedlight.engines.base import LocalCallback


class ProximalTerm(LocalCallback):
    """Adds the gradient of μ/2 ‖w − x‖² to the local gradients of the trainable parameters. A
    parameter without a gradient is skipped by the optimizer, so it stays at x."""

    def __init__(self, mu: float, anchor: StateDict, trainable: Sequence[str]) -> None:
        self.mu = mu
        self.anchor = {name: anchor[name] for name in trainable}  # the global weights x

    def correct_gradients(self, params: StateDict, grads: StateDict) -> StateDict:
        return {
            name: grad.add(params[name] - self.anchor[name], alpha=self.mu)
            if name in self.anchor
            else grad
            for name, grad in grads.items()
        }

    @classmethod
    def stack(cls, callbacks: Sequence["ProximalTerm"]) -> "ProximalTerm":
        mus = {callback.mu for callback in callbacks}
        if len(mus) != 1:
            raise ValueError(f"ProximalTerm.stack needs one μ for all clients, got {sorted(mus)}")
        names = list(callbacks[0].anchor)
        anchor = {name: torch.stack([c.anchor[name] for c in callbacks]) for name in names}
        return cls(mus.pop(), anchor, names)


VARIANTS: VariantTable = {
    "fedlight": {"update_weighting": "samples", "sampling": "any"},
    "paper": {"update_weighting": "uniform", "sampling": "proportional"},
}


@dataclass
class FedProx(FedAvg):
    mu: float = 0.01
    variant: str = "fedlight"  # fedlight | paper: fills the switches below left None
    update_weighting: str | None = None  # the deltas' own weighting: samples | uniform
    sampling: str | None = None  # any | proportional: the selection the weighting assumes

    def __post_init__(self) -> None:
        super().__post_init__()
        fill_from_variant(self, "algo.variant", VARIANTS)
        require(self.mu >= 0, f"algo.mu={self.mu} must be >= 0 (0 is FedAvg)")
        require(
            self.update_weighting in WEIGHTINGS,
            f"algo.update_weighting={self.update_weighting} is not a weighting; use samples or "
            "uniform",
        )
        require(
            self.sampling in ("any", "proportional"),
            f"algo.sampling={self.sampling} is not a sampling; use any or proportional",
        )
        if self.sampling == "proportional":
            self.needs_sampling_by_size = (
                f"algo.sampling=proportional (algo.variant={self.variant}): the plain mean of "
                "FedProx's paper is unbiased only for clients drawn ∝ n_k"
            )

    @property  # type: ignore[override]
    def parts(self) -> dict[str, Part]:  # the variant's weighting of the deltas
        assert self.update_weighting is not None
        return {
            UPDATE: Part(self.update_weighting, configurable=True),
            BUFFERS: Part("samples", configurable=False),
        }

    def local_callbacks(
        self, ctx: RoundContext, received: StateDict, client_state: StateDict | None
    ) -> list[LocalCallback]:
        return [ProximalTerm(self.mu, received, sorted(ctx.trainable))]
