"""LEAF's Shakespeare (Caldas et al. 2018; McMahan et al. 2017's next-character task): the lines
of each speaking role of each play, one client per role; an example is 80 characters and its
label the character that follows. Characters become indices into LEAF's 80-character vocabulary
(`LETTERS`, LEAF's models/utils/language_utils.py), which the labels share: inputs are int64
(N, 80) and there are 80 classes. A character outside it is refused, naming the file and user."""

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from fedlight.data.base import DataError
from fedlight.data.leaf import LeafFormat
from fedlight.data.torch_dataset import require_data

# LEAF's vocabulary, in its order: a character's index is its class
LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
UNKNOWN = -1
LOOKUP = np.full(max(map(ord, LETTERS)) + 1, UNKNOWN, dtype=np.int64)
LOOKUP[[ord(letter) for letter in LETTERS]] = np.arange(len(LETTERS))


def character_indices(text: str, where: str) -> np.ndarray:
    """Each character of `text` as its index in `LETTERS`."""
    points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
    indices = LOOKUP[np.minimum(points, len(LOOKUP) - 1)]
    unknown = np.flatnonzero((indices == UNKNOWN) | (points >= len(LOOKUP)))
    if len(unknown):
        raise DataError(
            f"{where}: character {text[unknown[0]]!r} is not in LEAF's 80-character vocabulary; "
            "write the files with LEAF's Shakespeare preprocessing"
        )
    return indices


@dataclass
class LeafShakespeare(LeafFormat):
    root: str | None = None  # LEAF's data/shakespeare/data, holding train/ and test/

    setting: ClassVar[str] = "data=leaf_shakespeare"
    made_by: ClassVar[str] = (
        "LEAF's scripts write it: in LEAF's data/shakespeare, ./preprocess.sh -s niid --sf 0.2 "
        "-k 0 -t sample --tf 0.8, then data.root=<leaf>/data/shakespeare/data"
    )

    def examples(self, x: list[Any], y: list[Any], where: str) -> tuple[Tensor, Tensor]:
        require_data(
            all(isinstance(text, str) for text in [*x, *y]),
            f"{where}: x and y must be strings (80 characters and the next one)",
        )
        lengths = {len(text) for text in x}
        require_data(
            len(lengths) == 1 and 0 not in lengths,
            f"{where}: the x strings differ in length ({sorted(lengths)[:3]}); LEAF's are all 80",
        )
        require_data(all(len(label) == 1 for label in y), f"{where}: each y must be one character")
        inputs = character_indices("".join(x), where).reshape(len(x), -1)
        labels = character_indices("".join(y), where)
        return torch.from_numpy(inputs), torch.from_numpy(labels)

    @property
    def classes(self) -> int:
        return len(LETTERS)
