"""MNIST dealt to devices as in FedProx's experiments (Li et al., MLSys 2020, Section 5.1 and
Appendix C.1; data/mnist/generate_niid.py in the authors' code): 1,000 devices, two digits each,
power-law sizes, read from fedlight's MNIST files.

The 70,000 images of both MNIST splits are pooled and standardized per pixel, (x − mean) /
(std + 0.001) over the pool, as the authors' script does. Device u holds the digits u mod 10 and
(u + 1) mod 10: first 5 images of each, then a power-law share of what remains of each digit, the
digit's remaining images times the device's lognormal(0, 2) draw over the sum of the draws of all
devices holding that digit (truncated; a share that would overrun the digit is skipped, as there).
Each device's examples are shuffled and split 90/10 into its training and test parts; the test
set is the union of the test parts (the authors' test accuracy), and each training example's
device is its client id (`partition=natural`).

Where the authors' script takes each digit's images in the order of the "MNIST original" file,
fedlight deals them in an order drawn from the seed, so every draw comes from the run's
generators: the digits' orders and the power-law draws from (seed, DATA, 0, 0), device u's
shuffle from (seed, DATA, 1, u).
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torchvision import datasets

from fedlight.core.errors import require
from fedlight.core.rng import Stream, numpy_generator
from fedlight.data.base import TensorDataset, image_normalization
from fedlight.data.idx import NUM_CLASSES
from fedlight.data.mnist import load_idx_dataset

FIRST = 5  # images of each of its digits every device gets before the power-law shares
DIGITS_PER_DEVICE = 2
TRAIN_SHARE = 0.9
STD_FLOOR = 0.001  # added to each pixel's std, as the authors' script does


def standardized(pool: Tensor) -> Tensor:
    """Each pixel standardized over the pool, (x − mean) / (std + 0.001), in float32."""
    by_pixel = pool.t().double().contiguous()  # each pixel's values in a row: fast reductions
    mean = by_pixel.mean(1)
    std = (by_pixel - mean[:, None]).square_().mean(1).sqrt_()
    return ((pool.float() - mean.float()) / (std + STD_FLOOR).float()).contiguous()


@dataclass
class FedProxMNIST:
    root: str = "data"
    download: bool = True
    num_devices: int = 1000
    seed: int = 0  # the YAML's ${seed}

    def __post_init__(self) -> None:
        require(
            self.num_devices >= NUM_CLASSES and self.num_devices % NUM_CLASSES == 0,
            f"data.num_devices={self.num_devices} must be a positive multiple of 10 (device u "
            "holds digits u mod 10 and (u + 1) mod 10)",
        )

    def deal(self, labels: np.ndarray) -> list[np.ndarray]:
        """Each device's indices into the pool (module docstring)."""
        shared = numpy_generator(self.seed, Stream.DATA)
        pools = [shared.permutation(np.flatnonzero(labels == digit)) for digit in range(10)]
        short = min(len(p) for p in pools)
        require(
            short >= self.num_devices,
            f"data.num_devices={self.num_devices} needs {self.num_devices} images of every digit "
            f"and the MNIST files hold {short} of one; use fewer devices",
        )
        taken = np.zeros(NUM_CLASSES, dtype=np.int64)
        held: list[list[np.ndarray]] = [[] for _ in range(self.num_devices)]
        slots = [(u, j, (u + j) % NUM_CLASSES) for u in range(self.num_devices) for j in (0, 1)]
        for u, _, digit in slots:
            held[u].append(pools[digit][taken[digit] : taken[digit] + FIRST])
            taken[digit] += FIRST
        draws = shared.lognormal(0, 2, (NUM_CLASSES, self.num_devices // NUM_CLASSES, 2))
        left = np.array([len(p) - self.num_devices for p in pools], dtype=np.float64)
        shares = left[:, None, None] * draws / draws.sum(axis=(1, 2), keepdims=True)
        for u, j, digit in slots:
            count = int(shares[digit, u // NUM_CLASSES, j])
            if taken[digit] + count < len(pools[digit]):
                held[u].append(pools[digit][taken[digit] : taken[digit] + count])
                taken[digit] += count
        return [np.concatenate(parts) for parts in held]

    def load(self) -> TensorDataset:
        identity = image_normalization((0.0,), (1.0,), normalize=False)
        mnist = load_idx_dataset(
            datasets.MNIST, self.root, self.download, "data=fedprox_mnist", identity
        )
        pool = torch.cat([mnist.train_x, mnist.test_x])
        labels = torch.cat([mnist.train_y, mnist.test_y])
        train, test, owners = [], [], []
        for u, indices in enumerate(self.deal(labels.numpy())):
            order = numpy_generator(self.seed, Stream.DATA, 1, u).permutation(indices)
            cut = int(TRAIN_SHARE * len(order))
            train.append(order[:cut])
            test.append(order[cut:])
            owners.append(np.full(cut, u))
        train_at, test_at = (torch.from_numpy(np.concatenate(parts)) for parts in (train, test))
        x = standardized(pool.flatten(1)).view(pool.shape)
        return TensorDataset(
            x[train_at],
            labels[train_at],
            x[test_at],
            labels[test_at],
            NUM_CLASSES,
            train_clients=torch.from_numpy(np.concatenate(owners)),
        )
