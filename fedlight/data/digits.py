"""scikit-learn's bundled 8×8 handwritten digits: the offline default, ready in milliseconds."""

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.datasets import load_digits

from fedlight.data.base import TensorDataset

TEST_FRACTION = 0.2


@dataclass
class Digits:
    """1,797 images, 10 classes; a fixed stratified 80/20 split that does not depend on the seed."""

    root: str | None = None
    download: bool = False

    def load(self) -> TensorDataset:
        bunch = load_digits()
        images = torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0
        labels = torch.tensor(bunch.target, dtype=torch.int64)
        images = (images - images.mean()) / images.std()
        test_mask = np.zeros(len(labels), dtype=bool)
        split_rng = np.random.default_rng(0)
        for label in range(10):
            members = np.flatnonzero(bunch.target == label)
            chosen = split_rng.choice(members, round(len(members) * TEST_FRACTION), replace=False)
            test_mask[chosen] = True
        test = torch.from_numpy(test_mask)
        return TensorDataset(images[~test], labels[~test], images[test], labels[test], 10)
