"""FedAsync of Xie et al., "Asynchronous Federated Optimization", 2019 (Algorithm 1): every
arriving client model is mixed into the global model at once,
x ← (1 − α_t) x + α_t x_new, α_t = α·s(τ),
with x_new the client's model (the model it started from plus its uploaded delta) and τ its
staleness (`fedlight.algorithms.asynchronous`). Variant implemented: the client trains the
configured local epochs (the paper's H local iterations of SGD, without its proximal term, which
`algo=fedprox` would add); the mixing replaces the aggregator and the server optimizer. Integer
buffers keep the server's values.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from fedlight.algorithms.asynchronous import Arrival, AsynchronousFedAvg
from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.core.messages import ServerState


@dataclass
class FedAsync(AsynchronousFedAvg):
    alpha: float = 0.6  # α, the mixing weight of a fresh update
    fixed_server: ClassVar[str | None] = (
        "it mixes each arriving model into the global model (x ← (1 − α_t) x + α_t x_new)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        require(0 < self.alpha <= 1, f"algo.alpha={self.alpha} must lie in (0, 1]")

    def apply_arrivals(
        self, ctx: RoundContext, server: ServerState, arrivals: Sequence[Arrival]
    ) -> ServerState:
        (arrival,) = arrivals
        mixing = self.alpha * self.weight_of(arrival.staleness)
        delta = arrival.upload.tensors
        mixed = {}
        for name, current in server.weights.items():
            if current.is_floating_point() and name in delta:
                arrived = arrival.start[name] + delta[name]
                mixed[name] = current + mixing * (arrived - current)
            else:
                mixed[name] = current
        return ServerState(mixed, server.extras)
