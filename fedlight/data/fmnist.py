"""Fashion-MNIST (Xiao et al. 2017) from torchvision's IDX files at `data.root`."""

from dataclasses import dataclass

from torchvision import datasets

from fedlight.data.base import TensorDataset
from fedlight.data.mnist import load_idx_dataset

MEAN, STD = (0.2860,), (0.3530,)


@dataclass
class FashionMNIST:
    root: str = "data"
    download: bool = True

    def load(self) -> TensorDataset:
        return load_idx_dataset(
            datasets.FashionMNIST, self.root, self.download, "data=fmnist", MEAN, STD
        )
