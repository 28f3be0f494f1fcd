"""MNIST (LeCun et al. 1998) from torchvision's IDX files at `data.root`."""

from dataclasses import dataclass

from torchvision import datasets

from fedlight.data.base import TensorDataset, normalize
from fedlight.data.torchvision_source import open_torchvision

MEAN, STD = (0.1307,), (0.3081,)
IDX_FILES = (
    "train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
    "t10k-labels-idx1-ubyte"
)


@dataclass
class MNIST:
    root: str = "data"
    download: bool = True

    def load(self) -> TensorDataset:
        train, test = open_torchvision(
            datasets.MNIST, self.root, self.download, f"MNIST/raw/{{{IDX_FILES}}}", "data=mnist"
        )
        return TensorDataset(
            normalize(train.data.unsqueeze(1), MEAN, STD),
            train.targets.long(),
            normalize(test.data.unsqueeze(1), MEAN, STD),
            test.targets.long(),
            10,
        )
