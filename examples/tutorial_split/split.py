"""The FedAvg tutorial's §1.3 non-IID split (`create_non_iid_split`), as it is written, for
`partition=callable partition.overlap=true` (docs/data-and-models.md, "Your own data").

What it does, step for step: the training indices sorted by label; a shard size of
n // (num_clients · shards_per_client); then for each client two distinct classes drawn at
random, and from each class's block of the sorted indices (positions 5000·c to 5000·(c + 1): it
assumes CIFAR-10's 5,000 training images per class) shard_size // 2 indices drawn without
replacement; all of it concatenated into one flat index list. Each client's draws ignore the
others', so two clients of one class share examples (overlapping draws), and whatever
`shards_per_client` says, a client holds two classes of shard_size // 2 examples each: on
CIFAR-10 with 100 clients, 250 examples a client, 25,000 listings for 50,000 images. The flat
list has no client boundaries; client i's are its entries i·k to (i + 1)·k − 1, k = 2 ·
(shard_size // 2), which is how `split` hands them to fedlight.

Its `np.random` draws come from the run's generator here (seed, PARTITION), as fedlight draws
everything; the labels are sorted stably (the tutorial's `torch.argsort` need not be, which
changes which examples a draw picks, not how many or of which class).
"""

import numpy as np

CLASSES = 10  # the tutorial's `np.random.choice(10, 2, ...)`
CLASS_BLOCK = 5000  # its `sorted_indices[cls*5000 : (cls+1)*5000]`: CIFAR-10's images per class
CLASSES_PER_CLIENT = 2  # its class_pair


def flat_split(
    labels: np.ndarray,
    num_clients: int,
    generator: np.random.Generator,
    shards_per_client: int = 2,
    class_block: int = CLASS_BLOCK,
) -> np.ndarray:
    """The tutorial's function: one flat array of every client's indices, client after client."""
    by_label = np.argsort(labels, kind="stable")
    shard_size = len(labels) // (num_clients * shards_per_client)
    drawn = []
    for _ in range(num_clients):
        for label in generator.choice(CLASSES, CLASSES_PER_CLIENT, replace=False):
            block = by_label[label * class_block : (label + 1) * class_block]
            drawn.append(generator.choice(block, shard_size // 2, replace=False))
    return np.concatenate(drawn).astype(np.int64)


def split(
    labels: np.ndarray,
    num_clients: int,
    generator: np.random.Generator,
    class_block: int = CLASS_BLOCK,
) -> list[np.ndarray]:
    """`flat_split` cut into its clients' consecutive runs: what `partition.function` takes."""
    return np.split(
        flat_split(labels, num_clients, generator, class_block=class_block), num_clients
    )
