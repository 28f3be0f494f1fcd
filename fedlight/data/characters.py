"""Text as character indices, for next-character prediction (McMahan et al. 2017; LEAF's
Shakespeare, Caldas et al. 2018): each character becomes its position in a vocabulary, which
inputs and labels share, so the model's classes are the vocabulary's characters. `LEAF_LETTERS`
is LEAF's 80-character vocabulary, in LEAF's order (its models/utils/language_utils.py)."""

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from fedlight.data.base import DataError
from fedlight.data.torch_dataset import require_data

UNKNOWN = -1


@dataclass
class Vocabulary:
    """Characters in order, a character's index its class; `name` says which in refusals."""

    letters: str
    name: str
    lookup: np.ndarray = field(init=False, repr=False)  # code point -> index (UNKNOWN)

    def __post_init__(self) -> None:
        require_data(
            len(self.letters) >= 2 and len(set(self.letters)) == len(self.letters),
            f"{self.name} must hold at least two characters, none twice",
        )
        self.lookup = np.full(max(map(ord, self.letters)) + 1, UNKNOWN, dtype=np.int64)
        self.lookup[[ord(letter) for letter in self.letters]] = np.arange(len(self.letters))

    def indices(self, text: str, where: str) -> np.ndarray:
        """Each character of `text` as its index; one outside the vocabulary is refused."""
        points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
        indices = self.lookup[np.minimum(points, len(self.lookup) - 1)]
        unknown = np.flatnonzero((indices == UNKNOWN) | (points >= len(self.lookup)))
        if len(unknown):
            raise DataError(f"{where}: character {text[unknown[0]]!r} is not in {self.name}")
        return indices

    def windows(self, x: list[str], y: list[str], where: str) -> tuple[Tensor, Tensor]:
        """Strings of one length and the character following each, as int64 (N, L) inputs and
        (N,) labels."""
        require_data(
            all(isinstance(text, str) for text in [*x, *y]),
            f"{where}: inputs and labels must be strings (a window of text and the next character)",
        )
        lengths = {len(text) for text in x}
        require_data(
            len(lengths) == 1 and 0 not in lengths,
            f"{where}: the input strings differ in length ({sorted(lengths)[:3]}); give windows "
            "of one length (LEAF's are 80 characters)",
        )
        require_data(
            all(len(label) == 1 for label in y), f"{where}: each label must be one character"
        )
        inputs = self.indices("".join(x), where).reshape(len(x), -1)
        return torch.from_numpy(inputs), torch.from_numpy(self.indices("".join(y), where))


LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
LEAF_LETTERS = Vocabulary(LETTERS, "LEAF's 80-character vocabulary")
