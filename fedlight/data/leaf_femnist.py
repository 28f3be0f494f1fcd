"""LEAF's FEMNIST (Caldas et al. 2018): Extended MNIST's handwritten digits and letters split by
writer, 62 classes (10 digits, 26 upper-case, 26 lower-case letters), each image 28×28 grey
values in [0, 1] flattened into 784 numbers, as LEAF's preprocessing writes them; read as
(1, 28, 28) images, unstandardized, as LEAF's CNN trains on them."""

from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor

from fedlight.data.leaf import LeafFormat, label_tensor, numeric_inputs

IMAGE_SHAPE = (1, 28, 28)
NUM_CLASSES = 62


@dataclass
class LeafFEMNIST(LeafFormat):
    root: str | None = None  # LEAF's data/femnist/data, holding train/ and test/

    setting: ClassVar[str] = "data=leaf_femnist"
    made_by: ClassVar[str] = (
        "LEAF's scripts write it: in LEAF's data/femnist, ./preprocess.sh -s niid --sf 0.05 -k 0 "
        "-t sample, then data.root=<leaf>/data/femnist/data"
    )

    def examples(self, x: list[Any], y: list[Any], where: str) -> tuple[Tensor, Tensor]:
        return numeric_inputs(x, IMAGE_SHAPE, where), label_tensor(y, where)

    @property
    def classes(self) -> int:
        return NUM_CLASSES
