"""Uniform sampling of clients without replacement, as in FedAvg (McMahan et al. 2017)."""

from dataclasses import dataclass

import numpy as np


@dataclass
class RandomSelection:
    def select(
        self, round_index: int, num_clients: int, clients_per_round: int, rng: np.random.Generator
    ) -> list[int]:
        """Sorted client ids, so the aggregation order (and its rounding) is reproducible."""
        # numpy draws this with a partial shuffle of arange(N) in C for N <= 10,000 (8 bytes per
        # client, ~20 µs in all) and in O(K) above; another method would change every run's clients.
        chosen = rng.choice(num_clients, size=clients_per_round, replace=False)
        return sorted(int(c) for c in chosen)
