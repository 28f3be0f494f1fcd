"""Fixed label blocks: client i holds the labels k·i, k·i + 1, …, k·i + k − 1 (mod L, the L
classes in sorted order), with k = `classes_per_client`.

This is the split the SCAFFOLD tutorial writes out (`client_0`: digits 0 and 1, `client_1`: 2 and
3, …, `client_9`: 8 and 9; its §1.1), and the "pathological non-IID" split of McMahan et al. 2017
without its randomness in which labels go where. Where N·k ≤ L no two clients share a label;
otherwise (the tutorial's 10 clients × 2 labels of a 10-class dataset) the blocks
wrap around and each label is split evenly, at random, among the clients holding it (clients i and
i + L/k then hold the same two labels, each about half of their examples). Only the split of a
label among its holders is drawn; which labels a client holds does not depend on the seed. A label
no client holds stays unused.
"""

from dataclasses import dataclass

import numpy as np

from fedlight.core.errors import require
from fedlight.partitions.base import Partition


@dataclass
class LabelBlocks(Partition):
    classes_per_client: int = 2  # k consecutive labels per client

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
        k = self.classes_per_client
        require(
            k <= len(classes),
            f"partition.classes_per_client={k} exceeds the {len(classes)} classes of the dataset",
        )
        holders: dict[int, list[int]] = {}
        for client in range(num_clients):
            for j in range(k):
                holders.setdefault((k * client + j) % len(classes), []).append(client)
        clients: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for position, label in enumerate(classes):
            members = rng.permutation(np.flatnonzero(labels == label))
            holding = holders.get(position, [])
            for client, part in zip(
                holding, np.array_split(members, max(len(holding), 1)), strict=False
            ):
                clients[client].append(part)
        return [np.sort(np.concatenate(parts)) for parts in clients]
