"""What every partition scheme shares: the split of the training pool into client sets, and of
each client's set into its training part and its local test part (`client_test_fraction`).

A client's local test set comes from its own data distribution, so a personalized model can be
judged where it is used; it is held out per label (stratified) with a generator derived from
(seed, LOCAL_TEST, client), so it does not depend on any other client or on the scheme's draws.
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from fedlight.errors import require
from fedlight.rng import Stream, numpy_generator


@dataclass
class Partition(ABC):
    client_test_fraction: float = 0.0  # share of each client's examples held out, per label

    def __post_init__(self) -> None:
        require(
            0 <= self.client_test_fraction < 1,
            f"partition.client_test_fraction={self.client_test_fraction} must lie in [0, 1); "
            "use e.g. 0.2, or 0 for no local test sets",
        )

    @abstractmethod
    def __call__(
        self, labels: np.ndarray, num_clients: int, rng: np.random.Generator
    ) -> list[np.ndarray]:
        """Each client's sorted indices into the training pool."""

    def hold_out(
        self, client_sets: list[np.ndarray], labels: np.ndarray, seed: int
    ) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
        """Each client's training and local test indices (sorted, disjoint, together its set);
        None for the test sets when `client_test_fraction` is 0."""
        if self.client_test_fraction == 0:
            return client_sets, None
        train, test = [], []
        for client, indices in enumerate(client_sets):
            rng = numpy_generator(seed, Stream.LOCAL_TEST, 0, client)
            held = [
                rng.permutation(of_label)[: round(self.client_test_fraction * len(of_label))]
                for label in np.unique(labels[indices])
                for of_label in [indices[labels[indices] == label]]
            ]
            chosen = np.sort(np.concatenate(held)) if held else indices[:0]
            test.append(chosen)
            train.append(np.setdiff1d(indices, chosen, assume_unique=True))
        return train, test
