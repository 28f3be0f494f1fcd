"""Round-robin selection: every client once per ⌈N/K⌉ rounds, in a seeded order.

The FedAvg tutorial's fair baseline (§2.2): a permutation of the clients drawn once from the
run's seed is walked K clients per round and wraps around, so no client waits longer than
⌈N/K⌉ rounds and none trains twice as often as another. It needs no state: round r takes
positions (r−1)·K … r·K−1 of the permutation, modulo N.
"""

from dataclasses import dataclass

import numpy as np

from fedlight.core.context import RoundContext
from fedlight.core.rng import Stream, numpy_generator
from fedlight.stages.selection.base import Population, Selection


@dataclass
class RoundRobin(Selection):
    def select(self, ctx: RoundContext, clients_per_round: int, seen: Population) -> list[int]:
        order = numpy_generator(ctx.seed, Stream.SELECTION).permutation(ctx.num_clients)
        start = (ctx.round_index - 1) * clients_per_round
        positions = np.arange(start, start + clients_per_round) % ctx.num_clients
        return sorted(int(c) for c in order[positions])
