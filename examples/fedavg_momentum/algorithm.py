"""FedAvg with server momentum (FedAvgM: Hsu et al., "Measuring the Effects of Non-Identical Data
Distribution for Federated Visual Classification", 2019), written from scratch against fedlight's
`Algorithm` contract (docs/howto/add-algorithm.md).

Each client uploads its model delta Δ_i = y_i − x; the server averages the parameters' deltas with
the configured aggregator (by default the sample-weighted mean) and takes a heavy-ball step,
m ← β m + Δ, x ← x + η m. fedlight's own `algo=fedavgm` applies the same rule through its server
optimizer, so both give the same metrics.csv (tests/project/test_examples.py checks it).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from fedlight import (
    Aggregator,
    Algorithm,
    ClientUpload,
    Federation,
    LocalResult,
    Mean,
    Part,
    RoundContext,
    ServerState,
    StateDict,
    require,
)

UPDATE = "update"  # the parameters' deltas: through the configured aggregator
BUFFERS = "buffers"  # BatchNorm's running statistics: their sample-weighted mean, as FedAvg's


@dataclass
class FedAvgMomentum(Algorithm):
    server_lr: float = 1.0  # η
    momentum: float = 0.9  # β: the steady-state step is η/(1 − β) times FedAvg's
    # The aggregator of the `update` part: the config passes `aggregator=`'s object in, because
    # the algorithm is a dataclass with a field of that name.
    aggregator: Aggregator = field(default_factory=Mean)

    parts: ClassVar[dict[str, Part]] = {
        UPDATE: Part("samples", configurable=True),
        BUFFERS: Part("samples", configurable=False),
    }
    # No `server_opt` field: the momentum is the method's own, so `server_opt=adam` is refused.
    fixed_server: ClassVar[str | None] = "it applies its own momentum (algo.server_lr, momentum)"

    def __post_init__(self) -> None:
        require(self.server_lr > 0, f"algo.server_lr={self.server_lr} must be > 0")
        require(0 <= self.momentum < 1, f"algo.momentum={self.momentum} must be in [0, 1)")

    def init_server(self, weights: StateDict, federation: Federation) -> ServerState:
        """The global model and m = 0 per parameter, in the server's extras: checkpointed with
        the model, so a resumed run continues with the same momentum."""
        momentum = {
            f"m/{name}": torch.zeros_like(t)
            for name, t in weights.items()
            if name in federation.trainable
        }
        return ServerState(weights, momentum)

    def upload(
        self,
        ctx: RoundContext,
        received: StateDict,
        local: LocalResult,
        client_state: StateDict | None,
    ) -> tuple[ClientUpload, StateDict | None]:
        """The client's delta from the model it received; it keeps no state (None)."""
        delta = {name: local.weights[name] - received[name] for name in received}
        return ClientUpload(local.client_id, local.num_samples, local.num_steps, delta), None

    def split(self, ctx: RoundContext, upload: ClientUpload) -> dict[str, StateDict]:
        """One decoded upload as the parts the server aggregates."""
        return {
            UPDATE: {name: t for name, t in upload.tensors.items() if name in ctx.trainable},
            BUFFERS: {name: t for name, t in upload.tensors.items() if name not in ctx.trainable},
        }

    def server_update(
        self,
        ctx: RoundContext,
        server: ServerState,
        aggregates: Mapping[str, StateDict | None],
        contributors: Sequence[tuple[int, int, int]],
    ) -> ServerState:
        """m ← β m + Δ and x ← x + η m for the parameters; the buffers' mean delta added."""
        update, buffers = aggregates[UPDATE], aggregates[BUFFERS]
        if update is None or buffers is None:  # no participant had data: the model stays
            return server
        weights, extras = dict(server.weights), dict(server.extras)
        for name, delta in update.items():
            extras[f"m/{name}"] = self.momentum * extras[f"m/{name}"] + delta
            weights[name] = weights[name] + self.server_lr * extras[f"m/{name}"]
        for name, delta in buffers.items():
            current = weights[name]  # an integer buffer (a step count) takes the rounded delta
            step = delta if current.is_floating_point() else torch.round(delta)
            weights[name] = current + step.to(current.dtype)
        return ServerState(weights, extras)
