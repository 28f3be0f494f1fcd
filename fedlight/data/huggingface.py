"""A Hugging Face `datasets` dataset (an optional dependency: `pip install 'fedlight[huggingface]'`)
as the run's data, converted once into tensors: a folder written by `save_to_disk`
(`data.path`, read by `load_from_disk`), or a dataset `datasets.load_dataset` opens (`data.name`:
a hub dataset the machine has cached, e.g. the federated FEMNIST flwr-datasets publishes as
flwrlabs/femnist, or a local folder of data files).

`data.input_column` and `data.label_column` choose the columns; `data.client_column` the one whose
values are the clients (FEMNIST's writer_id: `partition=natural` makes one client per id, in
sorted order). Inputs: images (kept uint8 as (C, H, W) and standardized per channel with the
training set's statistics, as `data=torch_dataset` does), numbers of one shape (float32), or
integer sequences (int64: token indices, for a model that embeds them). Labels: integers, a
ClassLabel's number of classes where the column is one. String inputs are text windows and their
labels the characters that follow, both read over `data.vocabulary` (LEAF's 80 characters by
default: flwr-datasets' Shakespeare is LEAF's), whose characters are the classes. A test
split's examples of a training client are that client's local test set, as LEAF's per-user split;
a dataset without a test split (`data.test_split=null`) holds out `data.test_fraction` of each
client's examples, drawn once with a generator of its own (seeded 0: the data's split, the same
for every run seed, as `data=digits`' split).
"""

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fedlight.core.errors import ConfigError, one_line, require
from fedlight.data.base import DataError, TensorDataset
from fedlight.data.characters import LEAF_LETTERS, Vocabulary
from fedlight.data.torch_dataset import (
    check_num_classes,
    converted,
    require_data,
    standardization,
)

SETTING = "data=huggingface"
INSTALL = "pip install 'fedlight[huggingface]' (or pip install 'datasets>=2.14')"
SPLIT_SEED = 0  # the held-out test set's draw (data.test_split=null): the data's, not the run's

Columns = tuple[np.ndarray, np.ndarray, np.ndarray | None]  # inputs, labels, client ids


def hf_datasets() -> ModuleType:
    """The `datasets` package, or a one-line refusal saying how to install it."""
    try:
        import datasets  # optional: only this data option needs it
    except ImportError:
        raise ConfigError(f"{SETTING} needs the Hugging Face datasets package; {INSTALL}") from None
    return datasets


@dataclass
class HuggingFace:
    path: str | None = None  # a folder written by save_to_disk (load_from_disk reads it)
    name: str | None = None  # else: what datasets.load_dataset opens (a cached hub name, a folder)
    config: str | None = None  # load_dataset's configuration name, with data.name
    train_split: str = "train"
    test_split: str | None = "test"  # None: data.test_fraction of each client's examples
    test_fraction: float = 0.1  # with test_split=None: the share held out per client
    input_column: str = "image"
    label_column: str = "label"
    client_column: str | None = None  # the column of client ids, for partition=natural
    num_classes: int | None = None  # None: a ClassLabel's number, else the largest label + 1
    vocabulary: str | None = None  # the characters text is read over; None: LEAF's 80

    def __post_init__(self) -> None:
        require(
            (self.path is None) != (self.name is None),
            f"{SETTING} takes one of data.path (a save_to_disk folder) and data.name (a dataset "
            f"for load_dataset), given {'both' if self.path else 'neither'}; set one",
        )
        require(
            0 < self.test_fraction < 1,
            f"data.test_fraction={self.test_fraction} must lie in (0, 1); e.g. 0.1",
        )
        check_num_classes(self.num_classes)
        self.characters()
        hf_datasets()

    def load(self) -> TensorDataset:
        return converted(repr(self), self.convert)

    def convert(self) -> TensorDataset:
        splits = self.opened()
        train_set = self.split(splits, self.train_split, "data.train_split")
        train = self.columns(train_set, self.train_split)
        if self.test_split is None:
            held = held_out(train[2], len(train[1]), self.test_fraction)
            require_data(
                len(held) > 0,
                f"data.test_fraction={self.test_fraction} holds out no example of the "
                f"{len(train[1])}; raise it, or name the dataset's test split (data.test_split)",
            )
            kept = np.setdiff1d(np.arange(len(train[1])), held, assume_unique=True)
            train, test = selected(train, kept), selected(train, held)
        else:
            test = self.columns(self.split(splits, self.test_split, "data.test_split"), "test")
        return self.tensors(train, test, label_classes(train_set.features, self.label_column))

    def opened(self) -> Any:
        """The dataset's splits (a DatasetDict; one saved Dataset is the training split)."""
        datasets = hf_datasets()
        try:
            if self.path is not None:
                require_data(
                    Path(self.path).is_dir(),
                    f"data.path={self.path} is not a folder; give the folder a dataset's "
                    "save_to_disk wrote",
                )
                found = datasets.load_from_disk(self.path)
            else:
                found = datasets.load_dataset(self.name, self.config)
        except (OSError, ValueError) as error:
            where = f"data.path={self.path}" if self.path else f"data.name={self.name}"
            raise DataError(
                f"{SETTING}: {where} cannot be opened ({one_line(error, limit=160)}); give a "
                "save_to_disk folder or a dataset this machine has"
            ) from None
        return {self.train_split: found} if isinstance(found, datasets.Dataset) else found

    def split(self, splits: Any, name: str, setting: str) -> Any:
        require_data(
            name in splits,
            f"{setting}={name} but the dataset's splits are {', '.join(splits)}; name one of them"
            + (" (or data.test_split=null to hold out a test set)" if "test" in setting else ""),
        )
        return splits[name]

    def columns(self, dataset: Any, split: str) -> Columns:
        """The split's inputs, labels and client ids as numpy arrays."""
        wanted = [self.input_column, self.label_column]
        if self.client_column is not None:
            wanted.append(self.client_column)
        for setting, column in zip(("input", "label", "client"), wanted, strict=False):
            require_data(
                column in dataset.column_names,
                f"data.{setting}_column={column} but the {split} split's columns are "
                f"{', '.join(dataset.column_names)}; name one of them",
            )
        values = dataset.with_format("numpy", columns=wanted)[:]
        ids = None if self.client_column is None else np.asarray(values[self.client_column])
        return values[self.input_column], values[self.label_column], ids

    def characters(self) -> Vocabulary:
        """The vocabulary string inputs and labels are read over."""
        if self.vocabulary is None:
            return LEAF_LETTERS
        return Vocabulary(self.vocabulary, f"data.vocabulary={self.vocabulary!r}")

    def examples(self, columns: Columns, split: str) -> tuple[Tensor, Tensor]:
        """A split's inputs and labels as tensors: strings as windows of characters and the
        character after each (next-character prediction), anything else as numbers."""
        inputs, labels, _ = columns
        if inputs.dtype.kind == "U":
            where = f"{SETTING}: the {split} split"
            return self.characters().windows(inputs.tolist(), labels.tolist(), where)
        return inputs_tensor(inputs, self.input_column), labels_tensor(labels, self.label_column)

    def tensors(self, train: Columns, test: Columns, classes: int | None) -> TensorDataset:
        train_x, train_y = self.examples(train, self.train_split)
        test_x, test_y = self.examples(test, self.test_split or "held-out test")
        if train[0].dtype.kind == "U":  # the classes are the vocabulary's characters
            classes = len(self.characters().letters)
        require_data(
            train_x.shape[1:] == test_x.shape[1:] and train_x.dtype == test_x.dtype,
            f"{SETTING}: training inputs are {train_x.dtype} {tuple(train_x.shape[1:])}, test "
            f"inputs {test_x.dtype} {tuple(test_x.shape[1:])}; both splits need the same",
        )
        largest = int(max(train_y.max(), test_y.max()))
        classes = self.num_classes or classes or largest + 1
        require_data(
            largest < classes,
            f"{SETTING}: labels go up to {largest} but data.num_classes={classes}; set it to the "
            "number of classes (or null)",
        )
        train_clients, test_clients = client_codes(train[2], test[2])
        return TensorDataset(
            train_x,
            train_y,
            test_x,
            test_y,
            classes,
            normalization=standardization(train_x) if train_x.dtype == torch.uint8 else None,
            train_clients=train_clients,
            test_clients=test_clients,
        )


def selected(columns: Columns, indices: np.ndarray) -> Columns:
    inputs, labels, ids = columns
    return inputs[indices], labels[indices], None if ids is None else ids[indices]


def label_classes(features: Any, column: str) -> int | None:
    """A ClassLabel column's number of classes; None for any other column."""
    return getattr(features.get(column), "num_classes", None)


def inputs_tensor(values: np.ndarray, column: str) -> Tensor:
    """A column's inputs: uint8 images as (N, C, H, W), integer sequences as int64, other numbers
    as float32; strings and ragged rows refused."""
    require_data(
        values.dtype != object and values.dtype.kind in "biuf" and len(values) > 0,
        f"data.input_column={column} holds {values.dtype} values ({str(values[:1])[:60]}); "
        "fedlight reads images, numbers of one shape and strings (text windows)",
    )
    if values.dtype == np.uint8 and values.ndim in (3, 4):  # grey (N, H, W) or (N, H, W, C)
        images = torch.from_numpy(np.ascontiguousarray(values))
        return images.unsqueeze(1) if values.ndim == 3 else images.permute(0, 3, 1, 2).contiguous()
    if values.dtype.kind in "iu" and values.dtype != np.uint8:
        return torch.from_numpy(values.astype(np.int64))
    inputs = torch.from_numpy(values.astype(np.float32))
    require_data(bool(torch.isfinite(inputs).all()), f"data.input_column={column} holds NaN or Inf")
    return inputs


def labels_tensor(values: np.ndarray, column: str) -> Tensor:
    require_data(
        values.ndim == 1 and values.dtype.kind in "iu" and len(values) > 0,
        f"data.label_column={column} holds {values.dtype} values, not class indices; make it a "
        "ClassLabel (dataset.class_encode_column) or integers 0..C-1",
    )
    require_data(bool((values >= 0).all()), f"data.label_column={column} has a negative label")
    return torch.from_numpy(values.astype(np.int64))


def client_codes(
    train_ids: np.ndarray | None, test_ids: np.ndarray | None
) -> tuple[Tensor | None, Tensor | None]:
    """Each training example's client (0..K-1, ids in sorted order) and each test example's in
    the same numbering (-1: an id no training example has); None where there are no ids, and for
    the test set where none of its ids is a training client's."""
    if train_ids is None or test_ids is None:
        return None, None
    ids, train_codes = np.unique(train_ids, return_inverse=True)
    position = np.searchsorted(ids, test_ids).clip(0, len(ids) - 1)
    test_codes = np.where(ids[position] == test_ids, position, -1)
    given = torch.from_numpy(test_codes.astype(np.int64))
    return torch.from_numpy(train_codes.astype(np.int64).reshape(-1)), (
        given if bool((given >= 0).any()) else None
    )


def held_out(ids: np.ndarray | None, count: int, fraction: float) -> np.ndarray:
    """The examples a dataset without a test split holds out as its test set (sorted):
    round(fraction · n) of each client's n (of all n without client ids), each client's drawn in
    turn from one generator seeded `SPLIT_SEED`."""
    if ids is None:
        groups = [np.arange(count)]
    else:
        _, codes = np.unique(ids, return_inverse=True)
        order = np.argsort(codes.reshape(-1), kind="stable")
        groups = np.split(order, np.cumsum(np.bincount(codes.reshape(-1)))[:-1])
    rng = np.random.default_rng(SPLIT_SEED)
    held = [rng.permutation(group)[: round(fraction * len(group))] for group in groups]
    return np.sort(np.concatenate(held))
