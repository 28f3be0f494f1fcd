"""Label-distribution skew from a Dirichlet prior: NIID-Bench's "labeldir" (Li et al., ICDE 2022).

For each class, client proportions are drawn from Dir(alpha); a client already holding its fair
share (N / num_clients) gets no more. Draws repeat until every client has at least
`min_samples` samples. Small alpha means few classes per client; large alpha approaches IID.
"""

from dataclasses import dataclass

import numpy as np

from fedlight.core.errors import ConfigError, require
from fedlight.partitions.base import Partition

MAX_ATTEMPTS = 1000


@dataclass
class Dirichlet(Partition):
    alpha: float = 0.5
    min_samples: int = 10

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.alpha > 0, f"partition.alpha={self.alpha} must be > 0 (e.g. 0.1 or 0.5)")
        require(self.min_samples >= 0, f"partition.min_samples={self.min_samples} must be >= 0")

    def __call__(
        self, labels: np.ndarray, num_clients: int, rng: np.random.Generator
    ) -> list[np.ndarray]:
        require(
            num_clients * self.min_samples <= len(labels),
            f"partition.min_samples={self.min_samples} × fl.num_clients={num_clients} exceeds the "
            f"{len(labels)} training samples; lower partition.min_samples",
        )
        fair_share = len(labels) / num_clients
        for _ in range(MAX_ATTEMPTS):
            clients: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
            sizes = np.zeros(num_clients, dtype=np.int64)
            for label in np.unique(labels):
                members = rng.permutation(np.flatnonzero(labels == label))
                eligible = sizes < fair_share
                proportions = rng.dirichlet(np.full(num_clients, self.alpha)) * eligible
                if proportions.sum() == 0:  # tiny alpha: every eligible share underflowed to 0.0
                    proportions = np.zeros(num_clients)
                    proportions[rng.choice(np.flatnonzero(eligible))] = 1.0
                proportions = proportions / proportions.sum()
                cuts = (np.cumsum(proportions) * len(members)).astype(np.int64)[:-1]
                for client, part in enumerate(np.split(members, cuts)):
                    clients[client].append(part)
                    sizes[client] += len(part)
            if sizes.min() >= self.min_samples:
                return [np.sort(np.concatenate(parts)) for parts in clients]
        raise ConfigError(
            f"partition=dirichlet could not give all {num_clients} clients >= "
            f"partition.min_samples={self.min_samples} samples in {MAX_ATTEMPTS} draws; "
            "raise partition.alpha or lower partition.min_samples"
        )
