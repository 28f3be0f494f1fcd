"""IID: a uniformly random split into client sets whose sizes differ by at most one."""

from dataclasses import dataclass

import numpy as np

from fedlight.partitions.base import Partition


@dataclass
class IID(Partition):
    def __call__(
        self, labels: np.ndarray, num_clients: int, rng: np.random.Generator
    ) -> list[np.ndarray]:
        return [np.sort(part) for part in np.array_split(rng.permutation(len(labels)), num_clients)]
