"""A map-style torch Dataset of one's own (torchvision's, or any class or function returning one),
converted once into fedlight's in-memory `TensorDataset`.

The contract (docs/data-and-models.md, "Your own data"): `len(dataset)` and `dataset[i]`, whose item
is
`(input, label)` (more elements are ignored) or, where the dataset has a `targets` attribute, the
input alone. An input is a tensor, a numpy array or a PIL image (stored as uint8 (C, H, W) and
standardized per channel with the training set's mean and std, as fedlight's own image datasets
are); every input has one shape and finite values; a label is an integer class index (an int,
or a tensor or array holding one, as torch's TensorDataset gives), and there are at most as many
classes as examples or `MAX_CLASSES`, whichever is more. With `client_key`, the
training set's attribute of that name gives each example's client id (any values: a writer's name,
a user's number), which `partition=natural` splits by. A torch `Subset` passes on the attributes of
the dataset it selects from.

`data=datamodule` converts a LightningDataModule's sets with the same code
(`fedlight.data.datamodule`).
"""

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import Tensor
from torch.utils.data import Subset
from torchvision.transforms.functional import pil_to_tensor

from fedlight.core.dotted import locate
from fedlight.core.errors import ConfigError, one_line, require
from fedlight.data.base import DataError, Normalization, TensorDataset

CHUNK = 4096  # examples per step of the per-channel statistics (float64 of a chunk at a time)
# The most classes a dataset may have beyond one per example: a label far beyond both is an id,
# not a class index (a label of 10⁹ would build an output layer of 10⁹ classes, hundreds of GB).
MAX_CLASSES = 10_000

# The last conversion in this process, by its settings: a run's settings are checked before any
# work (partition=natural counts the clients then) and run in the same process, which then finds
# the tensors here instead of converting the dataset again.
CONVERTED: dict[str, TensorDataset] = {}


def converted(key: str, convert: Callable[[], TensorDataset]) -> TensorDataset:
    """`convert()`'s dataset, converted once while `key` (its settings) stays the last one."""
    if key not in CONVERTED:
        CONVERTED.clear()
        CONVERTED[key] = convert()
    return CONVERTED[key]


def attribute(dataset: Any, name: str) -> np.ndarray | None:
    """The per-example attribute `name` of `dataset` (of the dataset a `Subset` selects from, at
    its indices); None where it has none."""
    if hasattr(dataset, name):
        return np.asarray(getattr(dataset, name))
    if isinstance(dataset, Subset):
        inner = attribute(dataset.dataset, name)
        return None if inner is None else inner[np.asarray(dataset.indices)]
    return None


def input_tensor(value: Any, where: str) -> Tensor:
    """One example's input as a tensor: a PIL image as uint8 (C, H, W)."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, Image.Image):
        return pil_to_tensor(value)
    raise DataError(
        f"{where} has an input of type {type(value).__name__}; return a tensor, a numpy array or "
        "a PIL image (a transform in data.kwargs can make one)"
    )


def label_index(value: Any, where: str) -> int:
    """One example's label as a class index: an int, or a tensor or array holding one (a torch
    TensorDataset's labels are 0-d tensors; entries are counted by `reshape(-1)`, which tensors
    and arrays share, not by `np.size`, which calls a tensor's `size` method)."""
    if isinstance(value, Tensor | np.ndarray | np.generic) and len(value.reshape(-1)) == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int):
        raise DataError(
            f"{where} has label {value!r}, not a class index; labels are integers 0..C-1"
        )
    return value


def examples(dataset: Any, split: str, source: str) -> tuple[Tensor, Tensor]:
    """A split's inputs stacked into one tensor, and its labels (int64)."""
    try:
        size = len(dataset)
    except TypeError:
        raise DataError(
            f"{source}: the {split} set ({type(dataset).__name__}) has no len(); fedlight needs a "
            "map-style Dataset (__len__ and __getitem__)"
        ) from None
    require_data(size > 0, f"{source}: the {split} set is empty; check data.root and its arguments")
    targets = None
    inputs, labels = [], []
    for index in range(size):
        item = dataset[index]
        where = f"{source}: the {split} set's item {index}"
        if isinstance(item, tuple | list) and len(item) >= 2:
            value, label = item[0], item[1]
        else:
            targets = attribute(dataset, "targets") if targets is None else targets
            require_data(
                targets is not None,
                f"{where} is a {type(item).__name__}, not (input, label), and the set has no "
                "`targets`; return (input, label) from __getitem__ or give it a targets attribute",
            )
            value, label = item, targets[index]  # type: ignore[index]
        inputs.append(input_tensor(value, where))
        labels.append(label_index(label, where))
    shape = inputs[0].shape
    for index, tensor in enumerate(inputs):
        require_data(
            tensor.shape == shape,
            f"{source}: the {split} set's item {index} has an input of shape {tuple(tensor.shape)} "
            f"and item 0 one of {tuple(shape)}; every input needs one shape (a transform in "
            "data.kwargs can resize them)",
        )
    stacked = torch.stack(inputs)
    if stacked.is_floating_point():
        stacked = stacked.float()
        flawed = torch.isfinite(stacked.flatten(1)).all(dim=1).logical_not().nonzero()
        if len(flawed):
            raise DataError(
                f"{source}: the {split} set's item {int(flawed[0])} has input values that are not "
                "finite (NaN or Inf); a model trained or tested on them gives NaN: replace them in "
                "the dataset (e.g. torch.nan_to_num in __getitem__ or a transform in data.kwargs)"
            )
    return stacked, torch.tensor(labels)


def require_data(condition: bool, message: str) -> None:
    if not condition:
        raise DataError(message)


def standardization(images: Tensor) -> Normalization:
    """Per-channel mean and std of uint8 images (N, C, H, W) scaled to [0, 1]: what fedlight's
    own image datasets standardize with, here measured on the training set."""
    sums = torch.zeros(images.shape[1], dtype=torch.float64)
    squares = torch.zeros_like(sums)
    for chunk in images.split(CHUNK):
        values = chunk.double().div_(255.0)
        sums += values.sum((0, 2, 3))
        squares += values.square().sum((0, 2, 3))
    count = images.numel() // images.shape[1]
    mean = sums / count
    std = (squares / count - mean.square()).clamp_min(0).sqrt()
    std[std == 0] = 1.0  # a constant channel stays centred, never divided by zero
    return Normalization(tuple(mean.tolist()), tuple(std.tolist()))


def client_ids(dataset: Any, key: str, count: int, source: str) -> Tensor:
    """Each training example's client as 0..K-1, the clients in the order of their sorted ids."""
    values = attribute(dataset, key)
    require_data(
        values is not None,
        f"data.client_key={key}: the training set of {source} has no attribute {key}; name the "
        "attribute that holds each example's client id (e.g. writers)",
    )
    require_data(
        values.shape == (count,),  # type: ignore[union-attr]
        f"data.client_key={key}: the training set's {key} has shape {values.shape} "  # type: ignore[union-attr]
        f"but the set holds {count} examples; it needs one client id per example",
    )
    _, codes = np.unique(values, return_inverse=True)
    return torch.from_numpy(codes.astype(np.int64).reshape(-1))


def to_tensors(
    train: Any, test: Any, source: str, client_key: str | None, num_classes: int | None
) -> TensorDataset:
    """A user's training and test sets as fedlight's `TensorDataset`; `source` names them in
    every error (`data.dataset=mypkg.MyDataset`)."""
    train_x, train_y = examples(train, "training", source)
    test_x, test_y = examples(test, "test", source)
    require_data(
        train_x.shape[1:] == test_x.shape[1:] and train_x.dtype == test_x.dtype,
        f"{source}: training inputs are {train_x.dtype} of shape {tuple(train_x.shape[1:])}, test "
        f"inputs {test_x.dtype} of shape {tuple(test_x.shape[1:])}; both splits need the same",
    )
    require_data(
        train_x.dtype != torch.uint8 or train_x.dim() == 4,
        f"{source}: uint8 inputs of shape {tuple(train_x.shape[1:])}; fedlight standardizes uint8 "
        "images per channel and needs them as (C, H, W): add the channel (x[None]) or return "
        "float tensors",
    )
    smallest = int(min(train_y.min(), test_y.min()))
    require_data(smallest >= 0, f"{source} has label {smallest}; labels are class indices 0..C-1")
    largest = int(max(train_y.max(), test_y.max()))
    classes = largest + 1 if num_classes is None else num_classes
    count = len(train_y) + len(test_y)
    require_data(
        classes <= max(count, MAX_CLASSES),
        f"{source} has labels up to {largest} but {count} examples: a model for {classes} classes; "
        "labels are class indices 0..C-1: map them to 0..C-1 (np.unique(labels, "
        "return_inverse=True) gives such indices)"
        if num_classes is None
        else f"data.num_classes={classes} but {source} has {count} examples: a model for "
        f"{classes} classes; set data.num_classes to the number of classes, or null for the "
        "largest label + 1",
    )
    require_data(
        largest < classes,
        f"data.num_classes={classes} but {source} has labels up to {largest}; set "
        "data.num_classes to the number of classes, or null for the largest label + 1",
    )
    return TensorDataset(
        train_x,
        train_y,
        test_x,
        test_y,
        classes,
        normalization=standardization(train_x) if train_x.dtype == torch.uint8 else None,
        train_clients=None
        if client_key is None
        else client_ids(train, client_key, len(train_y), source),
    )


def check_num_classes(num_classes: int | None) -> None:
    require(
        num_classes is None or num_classes >= 2,
        f"data.num_classes={num_classes} must be >= 2 (or null: the largest label + 1)",
    )


def check_arguments(factory: Any, arguments: dict[str, Any], setting: str, fix: str) -> None:
    """`factory` can be called with `arguments`: a wrong signature is one line before any work
    (a factory whose signature Python cannot read is called as it is)."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(**arguments)
    except TypeError as error:
        raise ConfigError(
            f"{setting} cannot be called with {{{', '.join(arguments)}}} ({error}); {fix}"
        ) from None


@dataclass
class TorchDataset:
    """`dataset(root=root, **kwargs, <split_argument>=train_split)` and the same with
    `test_split`, converted once into tensors (`root` passed only when set)."""

    dataset: str  # dotted path of a Dataset class or a function returning one
    root: str | None = None
    kwargs: dict[str, Any] | None = None  # both splits' other arguments
    split_argument: str = "train"  # the argument that picks the split (torchvision's `train`)
    train_split: Any = True  # its value for the training set
    test_split: Any = False  # its value for the test set
    client_key: str | None = None  # the training set's attribute of client ids (partition=natural)
    num_classes: int | None = None  # None: the largest label + 1

    def __post_init__(self) -> None:
        factory = locate(
            self.dataset,
            "data.dataset",
            "a map-style torch Dataset class or a function returning one, e.g. "
            "torchvision.datasets.MNIST",
        )
        require(
            callable(factory),
            f"data.dataset={self.dataset} is not callable ({type(factory).__name__}); give the "
            "Dataset class, e.g. torchvision.datasets.MNIST",
        )
        check_arguments(
            factory,
            self.arguments(self.train_split),
            f"data.dataset={self.dataset}",
            "set data.root, data.kwargs and data.split_argument to what it takes",
        )
        check_num_classes(self.num_classes)

    def arguments(self, split: Any) -> dict[str, Any]:
        """The arguments of one split: root, the shared kwargs, the split's own value."""
        root = {} if self.root is None else {"root": self.root}
        return {**root, **(self.kwargs or {}), self.split_argument: split}

    def open(self, split: Any) -> Any:
        factory = locate(self.dataset, "data.dataset", "a Dataset class")
        try:
            return factory(**self.arguments(split))
        except (RuntimeError, OSError) as error:  # torchvision's missing files, unreadable ones
            raise DataError(
                f"data.dataset={self.dataset}: its {self.split_argument}={split} split cannot be "
                f"opened ({one_line(error, limit=160)}); check data.root and data.kwargs"
            ) from None

    def load(self) -> TensorDataset:
        return converted(repr(self), self.convert)

    def convert(self) -> TensorDataset:
        return to_tensors(
            self.open(self.train_split),
            self.open(self.test_split),
            f"data.dataset={self.dataset}",
            self.client_key,
            self.num_classes,
        )
