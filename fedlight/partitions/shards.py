"""Pathological non-IID shards of McMahan et al. (AISTATS 2017), Section 3.

Sort the samples by label, cut them into `num_clients × shards_per_client` shards of equal size,
and give each client `shards_per_client` shards at random. With 2 shards per client most clients
see two classes. Samples beyond the last whole shard are left unused.
"""

from dataclasses import dataclass

import numpy as np

from fedlight.core.errors import ConfigError, require
from fedlight.partitions.base import Partition


@dataclass
class Shards(Partition):
    shards_per_client: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            self.shards_per_client >= 1,
            f"partition.shards_per_client={self.shards_per_client} must be >= 1",
        )

    def __call__(
        self, labels: np.ndarray, num_clients: int, rng: np.random.Generator
    ) -> list[np.ndarray]:
        num_shards = num_clients * self.shards_per_client
        if num_shards > len(labels):
            raise ConfigError(
                f"partition.shards_per_client={self.shards_per_client} × fl.num_clients="
                f"{num_clients} = {num_shards} shards exceeds the {len(labels)} training samples; "
                "lower one of them"
            )
        shuffled = rng.permutation(len(labels))
        by_label = shuffled[np.argsort(labels[shuffled], kind="stable")]
        shard_size = len(labels) // num_shards
        shards = by_label[: num_shards * shard_size].reshape(num_shards, shard_size)
        owners = rng.permutation(num_shards).reshape(num_clients, self.shards_per_client)
        return [np.sort(shards[own].ravel()) for own in owners]
