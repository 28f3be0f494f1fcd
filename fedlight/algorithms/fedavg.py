"""FedAvg: Federated Averaging of McMahan et al., "Communication-Efficient Learning of Deep Networks
from Decentralized Data", AISTATS 2017 (Algorithm 1), with a server learning rate.

Each client sends its model delta Δ_i = y_i − x; the server applies
x ← x + η_g Σ_i n_i Δ_i / Σ_i n_i.
With η_g = 1 this is the paper's sample-weighted model average. Buffers (e.g. BatchNorm running
statistics) are averaged the same way without the server learning rate.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from fedlight.aggregation.mean import WeightedMean
from fedlight.algorithms.base import Algorithm, ClientUpload, LocalResult, ServerState
from fedlight.config import require
from fedlight.tensors import StateDict, subtract


@dataclass
class FedAvg(Algorithm):
    server_lr: float = 1.0
    aggregator: WeightedMean = field(default_factory=WeightedMean)

    def __post_init__(self) -> None:
        require(self.server_lr > 0, f"algo.server_lr={self.server_lr} must be > 0")

    def upload(
        self, server: ServerState, local: LocalResult, client_state: StateDict | None
    ) -> tuple[ClientUpload, StateDict | None]:
        delta = subtract(local.weights, server.weights)
        return ClientUpload(local.client_id, local.num_samples, local.num_steps, delta), None

    def server_update(self, server: ServerState, uploads: Sequence[ClientUpload]) -> ServerState:
        return ServerState(
            self.apply_delta(server.weights, self.mean_delta(uploads)), server.extras
        )

    def mean_delta(self, uploads: Sequence[ClientUpload]) -> StateDict:
        """The aggregated model delta, each client weighted by its number of samples."""
        return self.aggregator(
            [u.tensors for u in uploads], [float(u.num_samples) for u in uploads]
        )

    def apply_delta(self, weights: StateDict, mean_delta: StateDict) -> StateDict:
        return apply_delta(weights, mean_delta, self.trainable, self.server_lr)


def apply_delta(
    weights: StateDict, delta: StateDict, trainable: frozenset[str], server_lr: float
) -> StateDict:
    """x + η_g Δ for parameters, x + Δ for buffers; integer buffers are rounded back."""
    updated: StateDict = {}
    for name, current in weights.items():
        step = server_lr if name in trainable else 1.0
        if current.is_floating_point():
            updated[name] = current + step * delta[name].to(current.dtype)
        else:
            updated[name] = current + torch.round(delta[name]).to(current.dtype)
    return updated
