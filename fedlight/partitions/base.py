"""The interface of a partition scheme."""

from typing import Protocol

import numpy as np


class Partition(Protocol):
    def __call__(
        self, labels: np.ndarray, num_clients: int, rng: np.random.Generator
    ) -> list[np.ndarray]: ...
