"""Quantity-based label skew: NIID-Bench's "#C=k" (Li et al., ICDE 2022).

Each client holds exactly `classes_per_client` distinct classes: client i gets class i mod K first,
then other classes at random. Each class is split evenly among the clients that hold it; a class no
client drew stays unused.
"""

from dataclasses import dataclass

import numpy as np

from fedlight.core.errors import require
from fedlight.partitions.base import Partition


@dataclass
class LabelQuantity(Partition):
    classes_per_client: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            self.classes_per_client >= 1,
            f"partition.classes_per_client={self.classes_per_client} must be >= 1",
        )

    def __call__(
        self, labels: np.ndarray, num_clients: int, rng: np.random.Generator
    ) -> list[np.ndarray]:
        classes = np.unique(labels)
        require(
            self.classes_per_client <= len(classes),
            f"partition.classes_per_client={self.classes_per_client} exceeds the "
            f"{len(classes)} classes of the dataset",
        )
        holdings = []
        for client in range(num_clients):
            first = classes[client % len(classes)]
            others = rng.permutation(classes[classes != first])[: self.classes_per_client - 1]
            holdings.append({first, *others.tolist()})
        clients: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for label in classes:
            holders = [c for c in range(num_clients) if label in holdings[c]]
            if not holders:
                continue
            members = rng.permutation(np.flatnonzero(labels == label))
            for client, part in zip(holders, np.array_split(members, len(holders)), strict=True):
                clients[client].append(part)
        return [np.sort(np.concatenate(parts)) for parts in clients]
