"""Poisson sampling: each client takes part independently with probability q = K/N.

The number of participants varies from round to round (K on average, possibly 0: such a round
keeps the global model, except under DP-FedAvg and adaptive clipping, whose server update adds
the round's noise to a zero sum, as Algorithm 1 of McMahan et al. 2018 does). This is the
sampling the privacy amplification of DP-FedAvg assumes (McMahan et al. 2018; Zhu & Wang 2019,
"Poisson subsampled Rényi differential privacy").
"""

from dataclasses import dataclass

import numpy as np

from fedlight.core.context import RoundContext
from fedlight.core.rng import Stream
from fedlight.stages.selection.base import Population, Selection


@dataclass
class Poisson(Selection):
    poisson_sampling = True

    def select(self, ctx: RoundContext, clients_per_round: int, seen: Population) -> list[int]:
        rate = clients_per_round / ctx.num_clients
        taking = ctx.generator(Stream.SELECTION).random(ctx.num_clients) < rate
        return [int(c) for c in np.flatnonzero(taking)]
