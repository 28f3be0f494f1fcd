"""MNIST (LeCun et al. 1998) from torchvision's IDX files at `data.root`."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torchvision import datasets

from fedlight.data.base import (
    Normalization,
    TensorDataset,
    data_root,
    image_normalization,
    require_regular_files,
)
from fedlight.data.idx import NUM_CLASSES, SPLITS, read_idx_split, split_files
from fedlight.data.torchvision_source import open_torchvision

MEAN, STD = (0.1307,), (0.3081,)


def load_idx_dataset(
    dataset_class: Callable[..., Any],
    root: str,
    download: bool,
    setting: str,
    normalization: Normalization,
) -> TensorDataset:
    """A 28×28 grey 10-class dataset in MNIST's IDX layout (`<root>/<ClassName>/raw/`).

    Files that are present are read and checked by our own reader; torchvision only downloads
    missing ones (md5-checked) or reads its legacy `processed/` copy.
    """
    raw = data_root(root, setting) / dataset_class.__name__ / "raw"
    files = [path for split in SPLITS for path in split_files(raw, split)]
    require_regular_files(files, setting)
    if all(path.is_file() for path in files):
        (train_x, train_y), (test_x, test_y) = (read_idx_split(raw, s, setting) for s in SPLITS)
    else:
        names = ", ".join(path.name for path in files)
        folder = f"{dataset_class.__name__}/raw/{{{names}}}"
        train, test = open_torchvision(dataset_class, root, download, folder, setting)
        train_x, train_y, test_x, test_y = train.data, train.targets, test.data, test.targets
    return TensorDataset(
        train_x.unsqueeze(1),
        train_y,
        test_x.unsqueeze(1),
        test_y,
        NUM_CLASSES,
        normalization=normalization,
    )


@dataclass
class MNIST:
    root: str = "data"
    download: bool = True
    normalize: bool = True  # False: pixels in [0, 1], not standardized

    def load(self) -> TensorDataset:
        normalization = image_normalization(MEAN, STD, self.normalize)
        return load_idx_dataset(
            datasets.MNIST, self.root, self.download, "data=mnist", normalization
        )
