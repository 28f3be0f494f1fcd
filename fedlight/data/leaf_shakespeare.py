"""LEAF's Shakespeare (Caldas et al. 2018; McMahan et al. 2017's next-character task): the lines
of each speaking role of each play, one client per role; an example is 80 characters and its
label the character that follows. Characters become indices into LEAF's 80-character vocabulary
(`fedlight.data.characters.LEAF_LETTERS`), which the labels share: inputs are int64 (N, 80) and
there are 80 classes. A character outside it is refused, naming the file and user."""

from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor

from fedlight.data.characters import LEAF_LETTERS
from fedlight.data.leaf import LeafFormat


@dataclass
class LeafShakespeare(LeafFormat):
    root: str | None = None  # LEAF's data/shakespeare/data, holding train/ and test/

    setting: ClassVar[str] = "data=leaf_shakespeare"
    made_by: ClassVar[str] = (
        "LEAF's scripts write it: in LEAF's data/shakespeare, ./preprocess.sh -s niid --sf 0.2 "
        "-k 0 -t sample --tf 0.8, then data.root=<leaf>/data/shakespeare/data"
    )

    def examples(self, x: list[Any], y: list[Any], where: str) -> tuple[Tensor, Tensor]:
        return LEAF_LETTERS.windows(x, y, where)

    @property
    def classes(self) -> int:
        return len(LEAF_LETTERS.letters)
