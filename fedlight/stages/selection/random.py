"""Uniform sampling of clients without replacement, as in FedAvg (McMahan et al. 2017)."""

from dataclasses import dataclass

from fedlight.core.context import RoundContext
from fedlight.core.rng import Stream
from fedlight.stages.selection.base import Population, Selection


@dataclass
class RandomSelection(Selection):
    def asynchronous_refusal(self) -> str | None:
        return None  # an asynchronous driver draws uniformly too, as slots free up

    def select(self, ctx: RoundContext, clients_per_round: int, seen: Population) -> list[int]:
        # numpy draws this with a partial shuffle of arange(N) in C for N <= 10,000 (8 bytes per
        # client, ~20 µs in all) and in O(K) above; another method would change every run's clients.
        rng = ctx.generator(Stream.SELECTION)
        chosen = rng.choice(ctx.num_clients, size=clients_per_round, replace=False)
        return sorted(int(c) for c in chosen)
