"""A user's own data for the tests, made up on the spot (nothing downloaded): a FEMNIST-style
dataset whose examples carry their writer, a torchvision-style image dataset, a
LightningDataModule, and user partition functions. Named on the command line as
`data.dataset=tests.helpers.own_data.Writers`, as a user names theirs."""

from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from PIL import Image
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset

# Not in sorted order: the clients come in the order of the sorted ids (alice is client 0).
WRITERS = ("carol", "alice", "erin", "bob", "dave")
CLASSES = 4


def writer_examples(train: bool) -> list[str]:
    """Each example's writer: writer i of WRITERS writes 6 + 2i training examples (so that
    clients differ in size), 3 test examples each; writers' examples interleave."""
    counts = [6 + 2 * i if train else 3 for i in range(len(WRITERS))]
    owners = np.repeat(np.arange(len(WRITERS)), counts)
    owners = np.random.default_rng(7 if train else 8).permutation(owners)
    return [WRITERS[i] for i in owners]


def learnable(labels: Tensor, seed: int, shape: tuple[int, ...]) -> Tensor:
    """Float inputs whose class shows: a bright row per class plus noise."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(len(labels), *shape, generator=generator) * 0.3
    for index, label in enumerate(labels.tolist()):
        images[index, ..., 2 * label, :] += 2.0
    return images


class Writers(Dataset):
    """FEMNIST-style: 8×8 float images of 4 classes, `writers` names each example's writer."""

    def __init__(self, root: str | None = None, train: bool = True) -> None:
        self.writers = writer_examples(train)
        generator = torch.Generator().manual_seed(1 if train else 2)
        self.labels = torch.randint(0, CLASSES, (len(self.writers),), generator=generator)
        self.images = learnable(self.labels, 3 if train else 4, (1, 8, 8))

    def __len__(self) -> int:
        return len(self.writers)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        return self.images[index], int(self.labels[index])


class TinyMNIST(Dataset):
    """torchvision's MNIST signature and item form: (PIL image, int), `targets` a tensor; 8×8
    grey images made from the seed instead of files under `root`."""

    def __init__(
        self, root: str, train: bool = True, download: bool = False, transform: Any = None
    ) -> None:
        count = 60 if train else 20
        generator = torch.Generator().manual_seed(5 if train else 6)
        self.targets = torch.randint(0, CLASSES, (count,), generator=generator)
        pixels = learnable(self.targets, 9 if train else 10, (8, 8))
        self.data = (pixels * 60 + 100).clamp(0, 255).to(torch.uint8)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image = Image.fromarray(self.data[index].numpy(), mode="L")
        return (image if self.transform is None else self.transform(image)), int(
            self.targets[index]
        )


class ImagesOnly(Dataset):
    """Items are inputs alone; the labels are its `targets` (a list)."""

    def __init__(self, train: bool = True) -> None:
        self.targets = [index % CLASSES for index in range(24 if train else 8)]
        self.images = learnable(torch.tensor(self.targets), 11, (1, 8, 8))

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> Tensor:
        return self.images[index]


class WritersData(pl.LightningDataModule):
    """A LightningDataModule over `Writers`: its training set a Subset (every example but the
    first two, which it keeps for validation), built in setup as Lightning's examples do."""

    def __init__(self, batch_size: int = 8) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.prepared = False

    def prepare_data(self) -> None:
        self.prepared = True  # where a real one downloads

    def setup(self, stage: str) -> None:
        if stage == "fit":
            whole = Writers(train=True)
            self.train_set = Subset(whole, list(range(2, len(whole))))
        if stage == "test":
            self.test_set = Writers(train=False)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=self.batch_size)


def random_parts(
    labels: np.ndarray, num_clients: int, generator: np.random.Generator
) -> list[np.ndarray]:
    """A user's split: a random permutation cut into `num_clients` parts."""
    return list(np.array_split(generator.permutation(len(labels)), num_clients))


def overlapping(
    labels: np.ndarray, num_clients: int, generator: np.random.Generator
) -> list[np.ndarray]:
    """A faulty split: every client gets example 0."""
    return [np.array([0, client + 1]) for client in range(num_clients)]


def always_two(
    labels: np.ndarray, num_clients: int, generator: np.random.Generator
) -> list[np.ndarray]:
    """A faulty split: two sets, whatever the number of clients."""
    return [np.array([0]), np.array([1])]


def not_a_list(labels: np.ndarray, num_clients: int, generator: np.random.Generator) -> np.ndarray:
    """A faulty split: one array of all indices."""
    return np.arange(len(labels))


def writes_labels(
    labels: np.ndarray, num_clients: int, generator: np.random.Generator
) -> list[np.ndarray]:
    """A faulty split: it writes into the labels it is given."""
    labels[0] = 1
    return [np.arange(len(labels))]


def wrong_arguments(labels: np.ndarray) -> list[np.ndarray]:
    """A function that cannot be a partition: it takes one argument."""
    return [np.arange(len(labels))]


def tensor_pairs(train: bool = True) -> TensorDataset:
    """torch's own TensorDataset, the commonest kind: its items are (input, 0-d label tensor)."""
    writers = Writers(train=train)
    return TensorDataset(writers.images, writers.labels)


class TensorData(pl.LightningDataModule):
    """A LightningDataModule over torch's TensorDataset."""

    def train_dataloader(self) -> DataLoader:
        return DataLoader(tensor_pairs(train=True), batch_size=4)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(tensor_pairs(train=False), batch_size=4)


class NoTrainLoader(TensorData):
    def train_dataloader(self) -> None:
        return None


class FailingTestLoader(TensorData):
    def test_dataloader(self) -> DataLoader:
        raise RuntimeError("the test files are on another disk")


class SeveralTestLoaders(TensorData):
    """Lightning's several test sets: a list of loaders."""

    def test_dataloader(self) -> list[DataLoader]:  # type: ignore[override]
        return [super().test_dataloader(), super().test_dataloader()]


class SetupFails(TensorData):
    """A setup that cannot find its files, as a user's raises it (an OSError without a file
    name)."""

    def setup(self, stage: str) -> None:
        raise FileNotFoundError("no data under /data/mine")
