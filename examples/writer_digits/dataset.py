"""Handwritten digits split by writer rather than by label (docs/howto/add-dataset.md).

scikit-learn's bundled 8×8 digits, each example given to one of `WRITERS` made-up writers whose
pen shifts the strokes and weighs them its own way: clients that differ in style and size, as
FEMNIST's writers do (Caldas et al., "LEAF: A Benchmark for Federated Settings", 2018), offline
and in milliseconds. A map-style torch Dataset, which `data=torch_dataset` converts once into
fedlight's tensors: items (image, label), the split chosen by `train` as torchvision's, and
`writers`, each example's writer, the attribute `data.client_key=writers` names for
`partition=natural` (client i is the i-th writer in sorted order).
"""

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import Tensor
from torch.utils.data import Dataset

WRITERS = 20
TEST_FRACTION = 0.2


class WriterDigits(Dataset):
    def __init__(self, train: bool = True) -> None:
        bunch = load_digits()
        # The writers, their pens and the split are the data's, the same whatever the run's seed.
        rng = np.random.default_rng(0)
        writer = rng.integers(0, WRITERS, len(bunch.target))
        shift = rng.integers(-1, 2, (WRITERS, 2))  # each pen's offset in rows and columns
        weight = rng.uniform(0.6, 1.4, WRITERS)  # and how heavy its strokes are
        written = np.stack(
            [
                np.roll(image, tuple(shift[w]), axis=(0, 1)) * weight[w]
                for image, w in zip(bunch.images, writer, strict=True)
            ]
        )
        written = (written - written.mean()) / written.std()  # standardized, as data=digits is
        chosen = (rng.random(len(bunch.target)) < TEST_FRACTION) != train
        self.images = torch.tensor(written[chosen], dtype=torch.float32).unsqueeze(1)
        self.labels = bunch.target[chosen].tolist()
        self.writers = [f"writer{w:02d}" for w in writer[chosen]]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        return self.images[index], self.labels[index]
