"""Sampling ∝ data size: FedProx's client sampling (Li et al., "Federated Optimization in
Heterogeneous Networks", MLSys 2020, Algorithm 2: device k with probability p_k = n_k / n).

Its code (flearn/trainers/fedbase.py, `select_clients` with sampling 2) draws K distinct clients,
each draw ∝ n_k among those not yet drawn, and pairs this with a plain mean of their updates, which
keeps the aggregate unbiased for Σ p_k F_k when K ≪ N: `algo=fedprox algo.variant=paper
selection=proportional`. Clients without data are never drawn; when fewer than K hold data, all
of them take part.
"""

from dataclasses import dataclass

from fedlight.core.context import RoundContext
from fedlight.stages.selection.base import Population, Selection, draw_by_size


@dataclass
class Proportional(Selection):
    draws_by_size = True

    def select(self, ctx: RoundContext, clients_per_round: int, seen: Population) -> list[int]:
        return sorted(draw_by_size(ctx, seen.pool.sizes, clients_per_round))
