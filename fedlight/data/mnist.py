"""MNIST (LeCun et al. 1998) from torchvision's IDX files at `data.root`."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torchvision import datasets

from fedlight.data.base import TensorDataset, normalize
from fedlight.data.torchvision_source import open_torchvision

MEAN, STD = (0.1307,), (0.3081,)
IDX_FILES = (
    "train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
    "t10k-labels-idx1-ubyte"
)


def load_idx_dataset(
    dataset_class: Callable[..., Any],
    root: str,
    download: bool,
    setting: str,
    mean: tuple[float, ...],
    std: tuple[float, ...],
) -> TensorDataset:
    """A 28×28 grey 10-class dataset in MNIST's IDX layout (`<root>/<ClassName>/raw/`)."""
    folder = f"{dataset_class.__name__}/raw/{{{IDX_FILES}}}"
    train, test = open_torchvision(dataset_class, root, download, folder, setting)
    return TensorDataset(
        normalize(train.data.unsqueeze(1), mean, std),
        train.targets.long(),
        normalize(test.data.unsqueeze(1), mean, std),
        test.targets.long(),
        10,
    )


@dataclass
class MNIST:
    root: str = "data"
    download: bool = True

    def load(self) -> TensorDataset:
        return load_idx_dataset(datasets.MNIST, self.root, self.download, "data=mnist", MEAN, STD)
