"""Fashion-MNIST (Xiao et al. 2017) from torchvision's IDX files at `data.root`."""

from dataclasses import dataclass

from torchvision import datasets

from fedlight.data.base import TensorDataset, normalize
from fedlight.data.mnist import IDX_FILES
from fedlight.data.torchvision_source import open_torchvision

MEAN, STD = (0.2860,), (0.3530,)


@dataclass
class FashionMNIST:
    root: str = "data"
    download: bool = True

    def load(self) -> TensorDataset:
        train, test = open_torchvision(
            datasets.FashionMNIST,
            self.root,
            self.download,
            f"FashionMNIST/raw/{{{IDX_FILES}}}",
            "data=fmnist",
        )
        return TensorDataset(
            normalize(train.data.unsqueeze(1), MEAN, STD),
            train.targets.long(),
            normalize(test.data.unsqueeze(1), MEAN, STD),
            test.targets.long(),
            10,
        )
