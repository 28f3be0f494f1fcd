"""FedAvg: Federated Averaging of McMahan et al., "Communication-Efficient Learning of Deep Networks
from Decentralized Data", AISTATS 2017 (Algorithm 1), with a pluggable server optimizer.

Each client sends its model delta Δ_i = y_i − x (x as it received it); the server aggregates the
parameters' deltas with the configured aggregator (default: the sample-weighted mean
Σ_i n_i Δ_i / Σ_i n_i) and hands the result to the server optimizer as a pseudo-gradient (Reddi et
al., ICLR 2021); `server_opt=sgd` with lr 1 is the paper's model average. Buffers (BatchNorm
running statistics) always take the sample-weighted mean delta, without the server optimizer.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from fedlight.aggregation.base import Aggregator, Part
from fedlight.aggregation.mean import Mean
from fedlight.algorithms.base import Algorithm
from fedlight.core.context import Federation, RoundContext
from fedlight.core.errors import require
from fedlight.core.messages import ClientUpload, LocalResult, ServerState
from fedlight.core.tensors import StateDict, subtract
from fedlight.server_opt.base import ServerOptimizer
from fedlight.server_opt.sgd import SGD

UPDATE = "update"  # the parameters' deltas: through the aggregator and the server optimizer
BUFFERS = "buffers"  # the buffers' deltas: sample-weighted mean, added as they are


@dataclass
class FedAvg(Algorithm):
    # η: in Python a shortcut for the default `SGD(lr=server_lr)` server optimizer; in a config
    # it is `server_opt.lr`. After construction, the server optimizer's learning rate.
    server_lr: float | None = None
    aggregator: Aggregator = field(default_factory=Mean)
    server_opt: ServerOptimizer | None = None  # None: SGD with `server_lr` (1.0 if unset)

    parts: ClassVar[dict[str, Part]] = {
        UPDATE: Part("samples", configurable=True),
        BUFFERS: Part("samples", configurable=False),
    }

    def __post_init__(self) -> None:
        require(
            self.server_lr is None or self.server_lr > 0,
            f"algo.server_lr={self.server_lr} must be > 0",
        )
        if self.server_opt is None:
            self.server_opt = self.default_server_opt()
        else:
            require(
                self.server_lr in (None, self.server_opt.lr),
                f"algo.server_lr={self.server_lr} and server_opt.lr={self.server_opt.lr} "
                "differ; give the server learning rate as server_opt.lr only",
            )
        self.server_lr = self.server_opt.lr  # η of the server optimizer, whichever set it

    def default_server_opt(self) -> ServerOptimizer:
        return SGD(lr=1.0 if self.server_lr is None else self.server_lr)

    @property
    def optimizer(self) -> ServerOptimizer:
        assert self.server_opt is not None  # set in __post_init__
        return self.server_opt

    def init_server(self, weights: StateDict, federation: Federation) -> ServerState:
        return ServerState(weights, self.optimizer.init_state(weights, federation.trainable))

    def upload(
        self,
        ctx: RoundContext,
        received: StateDict,
        local: LocalResult,
        client_state: StateDict | None,
    ) -> tuple[ClientUpload, StateDict | None]:
        delta = subtract(local.weights, received)
        return ClientUpload(local.client_id, local.num_samples, local.num_steps, delta), None

    def split(self, ctx: RoundContext, upload: ClientUpload) -> dict[str, StateDict]:
        return split_parameters(upload.tensors, ctx.trainable)

    def server_update(
        self,
        ctx: RoundContext,
        server: ServerState,
        aggregates: Mapping[str, StateDict | None],
        contributors: Sequence[tuple[int, int, int]],
    ) -> ServerState:
        update, buffers = aggregates[UPDATE], aggregates[BUFFERS]
        if update is None or buffers is None:  # no participant had data: the model stays
            return server
        return self.apply(server, update, buffers)

    def apply(
        self, server: ServerState, pseudo_gradient: StateDict, buffers: StateDict
    ) -> ServerState:
        """The server optimizer's step on the parameters, the buffers' mean delta added."""
        moved, extras = self.optimizer.step(server.weights, pseudo_gradient, server.extras)
        return ServerState(add_buffer_deltas(server.weights, moved, buffers), extras)


def split_parameters(tensors: StateDict, trainable: frozenset[str]) -> dict[str, StateDict]:
    """A state-dict-shaped upload as its parameters' and its buffers' parts."""
    return {
        UPDATE: {name: t for name, t in tensors.items() if name in trainable},
        BUFFERS: {name: t for name, t in tensors.items() if name not in trainable},
    }


def add_buffer_deltas(weights: StateDict, moved: StateDict, buffers: StateDict) -> StateDict:
    """`moved` parameters, and each buffer plus its mean delta (integer buffers rounded back), in
    the order of `weights`; entries that nobody uploaded (a method's personal layers) stay."""
    updated: StateDict = {}
    for name, current in weights.items():
        if name in moved:
            updated[name] = moved[name]
        elif name not in buffers:
            updated[name] = current
        elif current.is_floating_point():
            updated[name] = current + buffers[name].to(current.dtype)
        else:
            updated[name] = current + torch.round(buffers[name]).to(current.dtype)
    return updated
