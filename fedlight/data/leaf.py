"""LEAF's federated datasets (Caldas et al. 2018, arXiv 1812.01097) from the JSON files its
preprocessing writes: `<root>/train/*.json` and `<root>/test/*.json`, each an object
`{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y": [...]}}}`.

One client per user (`partition=natural`): the training set is every user's training examples,
users in sorted order of their ids (client i is the i-th); LEAF's own per-user test split gives
each client its local test set (`TensorDataset.test_clients`) and the union of them is the global
test set. A user with test examples and no training ones (LEAF's `-t user` split puts whole users
in the test set) adds them to the global test set only. `num_samples` is not read: the examples
are what `x` and `y` hold (LEAF's Shakespeare test files count the examples its split skips).

fedlight downloads nothing here: LEAF's scripts produce the files (docs/natural-datasets.md).
`data=leaf` reads any LEAF dataset of numbers (Synthetic, FEMNIST written as numbers);
`data=leaf_femnist` and `data=leaf_shakespeare` know their datasets' shapes and vocabulary.
"""

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from fedlight.core.errors import one_line
from fedlight.data.base import DataError, TensorDataset, data_root, require_regular_files
from fedlight.data.torch_dataset import check_num_classes, converted, require_data

SPLITS = ("train", "test")
GUIDE = "docs/natural-datasets.md"

Users = dict[str, tuple[Tensor, Tensor]]  # user id -> (inputs, labels)


def split_files(root: Path, split: str, setting: str, made_by: str) -> list[Path]:
    """The JSON files of one split, in the order of their names; a missing folder or an empty one
    is one line naming it and how LEAF's scripts write it."""
    folder = root / split
    require_data(
        folder.is_dir(),
        f"{setting}: {folder} is not a folder (data.root={root} needs LEAF's train/ and test/); "
        f"{made_by} ({GUIDE})",
    )
    files = sorted(folder.glob("*.json"))
    require_data(bool(files), f"{setting}: {folder} holds no .json file; {made_by} ({GUIDE})")
    require_regular_files(files, setting)
    return files


def user_records(path: Path, setting: str) -> list[tuple[str, list[Any], list[Any]]]:
    """Each user's (id, x, y) of one LEAF file, in the order of its `users`."""
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise DataError(
            f"{setting}: {path} is not JSON ({one_line(error, limit=120)}); write it again with "
            "LEAF's preprocess.sh"
        ) from None
    require_data(
        isinstance(content, dict)
        and isinstance(content.get("users"), list)
        and isinstance(content.get("user_data"), dict),
        f"{setting}: {path} is not a LEAF file: it needs the keys users (a list) and user_data "
        "(an object of each user's x and y); write it with LEAF's preprocess.sh",
    )
    records = []
    for user in content["users"]:
        data = content["user_data"].get(user)
        where = f"{setting}: {path}, user {user}"
        require_data(
            isinstance(data, dict),
            f"{where} is listed in users but has no entry in user_data; write the file again",
        )
        x, y = data.get("x"), data.get("y")
        require_data(
            isinstance(x, list) and isinstance(y, list) and len(x) == len(y),
            f"{where}: x and y must be lists of one length (one label per example)",
        )
        records.append((str(user), x, y))
    return records


def label_tensor(y: list[Any], where: str) -> Tensor:
    """A user's labels as int64 class indices."""
    labels = np.asarray(y)
    require_data(
        labels.ndim == 1 and np.issubdtype(labels.dtype, np.integer),
        f"{where}: labels must be integer class indices, found {str(y[:3])[:60]}",
    )
    require_data(
        bool((labels >= 0).all()), f"{where}: label {labels.min()} is negative; labels are 0..C-1"
    )
    return torch.from_numpy(labels.astype(np.int64))


def numeric_inputs(x: list[Any], shape: tuple[int, ...] | None, where: str) -> Tensor:
    """A user's inputs as float32, each reshaped to `shape` (None: as stored)."""
    try:
        inputs = torch.from_numpy(np.asarray(x, dtype=np.float32))
    except (ValueError, TypeError):
        raise DataError(
            f"{where}: x must be lists of numbers of one length; for Shakespeare's text use "
            "data=leaf_shakespeare"
        ) from None
    require_data(bool(torch.isfinite(inputs).all()), f"{where}: x holds NaN or Inf")
    if shape is None:
        return inputs
    require_data(
        inputs[0].numel() == int(np.prod(shape)),
        f"{where}: an example holds {inputs[0].numel()} numbers, which data.input_shape="
        f"{list(shape)} cannot hold; set data.input_shape to its shape (or null)",
    )
    return inputs.reshape(len(inputs), *shape)


def federated(train: Users, test: Users, num_classes: int | None, setting: str) -> TensorDataset:
    """The clients' training examples, users in sorted order, and the test set with each
    example's client (-1: a user without training examples)."""
    users = sorted(user for user, (_, y) in train.items() if len(y))
    require_data(bool(users), f"{setting}: the training files hold no example")
    tested = sorted(user for user, (_, y) in test.items() if len(y))
    require_data(bool(tested), f"{setting}: the test files hold no example")
    code = {user: index for index, user in enumerate(users)}
    shapes = {tuple(x.shape[1:]) for x, _ in [*train.values(), *test.values()] if len(x)}
    require_data(
        len(shapes) == 1,
        f"{setting}: the users' inputs differ in shape ({sorted(shapes)[:2]}); every example "
        "needs one shape",
    )
    train_y = torch.cat([train[user][1] for user in users])
    test_y = torch.cat([test[user][1] for user in tested])
    largest = int(max(train_y.max(), test_y.max()))
    classes = largest + 1 if num_classes is None else num_classes
    require_data(
        largest < classes,
        f"{setting}: labels go up to {largest} but the data has {classes} classes; set "
        "data.num_classes to the number of classes (or null: the largest label + 1)",
    )
    train_clients = each_example(list(range(len(users))), [train[user][1] for user in users])
    test_codes = [code.get(user, -1) for user in tested]
    test_clients = each_example(test_codes, [test[user][1] for user in tested])
    return TensorDataset(
        torch.cat([train[user][0] for user in users]),
        train_y,
        torch.cat([test[user][0] for user in tested]),
        test_y,
        classes,
        train_clients=train_clients,
        test_clients=test_clients if bool((test_clients >= 0).any()) else None,
    )


def each_example(codes: list[int], labels: list[Tensor]) -> Tensor:
    """Each example's client code, the users' examples one after the other."""
    counts = torch.tensor([len(y) for y in labels])
    return torch.repeat_interleave(torch.tensor(codes, dtype=torch.int64), counts)


class LeafFormat(ABC):
    """What every LEAF dataset shares: the files, the users, the clients; a dataset says how its
    `x` and `y` become tensors (`examples`) and how many classes it has."""

    root: str | None
    setting: ClassVar[str]  # the option, named in every error (data=leaf_femnist)
    made_by: ClassVar[str]  # how LEAF's scripts write the files, said where they are missing

    @abstractmethod
    def examples(self, x: list[Any], y: list[Any], where: str) -> tuple[Tensor, Tensor]:
        """One user's inputs and labels as tensors; `where` names the file and user in errors."""

    @property
    @abstractmethod
    def classes(self) -> int | None:
        """The number of classes; None: the largest label + 1."""

    def load(self) -> TensorDataset:
        return converted(repr(self), self.convert)

    def convert(self) -> TensorDataset:
        root = data_root(self.root, self.setting)
        train, test = (self.users(root, split) for split in SPLITS)
        return federated(train, test, self.classes, self.setting)

    def users(self, root: Path, split: str) -> Users:
        """Every user's examples of one split; a user listed in two of its files is refused."""
        found: Users = {}
        seen: dict[str, Path] = {}
        for path in split_files(root, split, self.setting, self.made_by):
            for user, x, y in user_records(path, self.setting):
                require_data(
                    user not in seen,
                    f"{self.setting}: user {user} is in both {seen.get(user)} and {path}; each "
                    f"user's {split} examples belong in one file",
                )
                seen[user] = path
                if y:
                    found[user] = self.examples(x, y, f"{self.setting}: {path}, user {user}")
        return found


@dataclass
class Leaf(LeafFormat):
    """Any LEAF dataset whose `x` are lists of numbers and `y` class indices: Synthetic (LEAF's
    generator, FedProx's `synthetic_*` folders), or FEMNIST with its shape given."""

    root: str | None = None  # the folder holding train/ and test/ (LEAF's data/<dataset>/data)
    input_shape: list[int] | None = None  # each example reshaped to it; None: as stored
    num_classes: int | None = None  # None: the largest label + 1

    setting: ClassVar[str] = "data=leaf"
    made_by: ClassVar[str] = (
        "LEAF's scripts write it, e.g. in LEAF's data/synthetic: python main.py -num-tasks 1000 "
        "-num-classes 5 -num-dim 60, then ./preprocess.sh -s niid --sf 1.0 -k 5 -t sample --tf "
        "0.6, and data.root=<leaf>/data/synthetic/data"
    )

    def __post_init__(self) -> None:
        check_num_classes(self.num_classes)

    def examples(self, x: list[Any], y: list[Any], where: str) -> tuple[Tensor, Tensor]:
        shape = None if self.input_shape is None else tuple(self.input_shape)
        return numeric_inputs(x, shape, where), label_tensor(y, where)

    @property
    def classes(self) -> int | None:
        return self.num_classes
