"""FedBuff of Nguyen et al., "Federated Learning with Buffered Asynchronous Aggregation", AISTATS
2022 (Algorithm 1): arriving updates are buffered, each weighted by s(τ) of its staleness; every
`buffer_size` (K) arrivals the server aggregates them and applies the aggregate through the
server optimizer (server_opt.lr is the paper's η_g), as FedAvg does with a round's updates.

Variant: the aggregate is the configured aggregator's (default the sample-weighted mean, so that
K = every client with τ = 0 is synchronous FedAvg; `aggregator.weighting=uniform` is the paper's
plain mean over the K updates) of the weighted deltas s(τ_i)·Δ_i.
"""

from collections.abc import Sequence
from dataclasses import dataclass, replace

from fedlight.algorithms.asynchronous import Arrival, AsynchronousFedAvg
from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.core.messages import ServerState


@dataclass
class FedBuff(AsynchronousFedAvg):
    buffer_size: int = 10  # K, arrivals per server update

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.buffer_size >= 1, f"algo.buffer_size={self.buffer_size} must be >= 1")
        self.arrivals_per_update = self.buffer_size

    def apply_arrivals(
        self, ctx: RoundContext, server: ServerState, arrivals: Sequence[Arrival]
    ) -> ServerState:
        aggregation = self.start_aggregation([a.upload.num_samples for a in arrivals])
        for arrival in arrivals:
            weight = self.weight_of(arrival.staleness)
            tensors = {
                name: t * weight if t.is_floating_point() else t
                for name, t in arrival.upload.tensors.items()
            }
            aggregation.add(self.contribution(ctx, replace(arrival.upload, tensors=tensors)))
        if not aggregation.contributors:  # every update was rejected: the model is kept
            return server
        return self.server_update(ctx, server, aggregation.results(), aggregation.contributors)
