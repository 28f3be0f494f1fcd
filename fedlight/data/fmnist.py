"""Fashion-MNIST (Xiao et al. 2017) from torchvision's IDX files at `data.root`."""

from dataclasses import dataclass

from torchvision import datasets

from fedlight.data.base import TensorDataset, image_normalization
from fedlight.data.mnist import load_idx_dataset

MEAN, STD = (0.2860,), (0.3530,)


@dataclass
class FashionMNIST:
    root: str = "data"
    download: bool = True
    normalize: bool = True  # False: pixels in [0, 1], not standardized

    def load(self) -> TensorDataset:
        normalization = image_normalization(MEAN, STD, self.normalize)
        return load_idx_dataset(
            datasets.FashionMNIST, self.root, self.download, "data=fmnist", normalization
        )
