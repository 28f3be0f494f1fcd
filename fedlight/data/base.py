"""The in-memory dataset every data source produces, and the per-batch normalization of images."""

import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch
from torch import Tensor

from fedlight.core.layout import CONTIGUOUS, Layout

BatchAugment = Callable[[Tensor, torch.Generator], Tensor]


class DataError(RuntimeError):
    """Data cannot be loaded; the message says which files to put where."""


FILE_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def data_root(root: str | None, setting: str) -> Path:
    """`data.root` as an absolute path; null is a one-line DataError (not a TypeError)."""
    if root is None:
        raise DataError(
            f"{setting} with data.root=null: give the folder that holds the data, or that its "
            "download goes to (e.g. data.root=../shared/data)"
        )
    return Path(root).resolve()


def require_regular_files(paths: Iterable[Path], setting: str) -> None:
    """Each of `paths` that exists is a regular file (through any links), else a one-line
    DataError: reading a FIFO blocks forever and a device such as /dev/zero never ends, and
    leaving such a file to torchvision reports it missing and downloads over it."""
    for path in paths:
        if not path.exists() or path.is_file():
            continue
        mode = path.stat().st_mode
        kind = next((name for test, name in FILE_KINDS if test(mode)), "not a regular file")
        if path.is_symlink():
            kind = f"a link to {os.path.realpath(path)}, {kind}"
        raise DataError(
            f"{setting}: {path} is {kind}, not a regular file; put the original file there"
        )


@dataclass(frozen=True)
class Normalization:
    """Per-channel standardization of uint8 images (…, C, H, W), applied to each batch where it
    is used: the dataset stays uint8 in memory, a quarter of float32's bytes (CIFAR-10's training
    set: 150 MB instead of 600 MB). Elementwise, so a batch gets the values normalizing the whole
    set would give it, bit for bit."""

    mean: tuple[float, ...]
    std: tuple[float, ...]
    # (mean, std) as (C, 1, 1) tensors per device, made once instead of at every batch
    on_device: dict[torch.device, tuple[Tensor, Tensor]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def __call__(self, images: Tensor) -> Tensor:
        if images.device not in self.on_device:
            self.on_device[images.device] = (
                torch.tensor(self.mean, device=images.device).view(-1, 1, 1),
                torch.tensor(self.std, device=images.device).view(-1, 1, 1),
            )
        mean, std = self.on_device[images.device]
        return (images.float() / 255.0 - mean).div_(std)


def image_normalization(
    mean: tuple[float, ...], std: tuple[float, ...], normalize: bool
) -> Normalization:
    """The dataset's per-channel standardization, or with `normalize=False` only the scaling to
    [0, 1] that torchvision's `ToTensor` gives: what NIID-Bench and Flower's niid_bench baseline
    train on (their transforms stop at `ToTensor`), bit for bit."""
    if normalize:
        return Normalization(mean, std)
    return Normalization(tuple(0.0 for _ in mean), tuple(1.0 for _ in std))


@dataclass
class TensorDataset:
    """Train and test sets as whole tensors: batches are formed by indexing, never per sample.

    With a `normalization`, `train_x` and `test_x` hold uint8 images and every consumer turns a
    batch of them into model inputs with `prepare`. `train_clients`, where the data has them,
    gives each training example's client (a writer, a speaker: `partition=natural`); it stays on
    the CPU, where the partition is computed. `val_x`, `val_y`: the validation set the run holds
    out of the training set (`data.validation_fraction`, `fedlight.data.validation`), or the
    source's own (a DataModule's `val_dataloader`); None without one. `batch_size`: the batch
    size of the source's own loaders (a DataModule's), which the run says `local.batch_size`
    replaces; None for a source without loaders. `test_clients`, where the data splits each
    client's examples into training and test itself (LEAF's per-user split): each test
    example's client in `train_clients`' numbering (-1: a user without training examples), which
    `partition=natural` makes the clients' local test sets; on the CPU as `train_clients`."""

    train_x: Tensor
    train_y: Tensor
    test_x: Tensor
    test_y: Tensor
    num_classes: int
    augment: BatchAugment | None = None
    normalization: Normalization | None = None
    train_clients: Tensor | None = None
    layout: Layout = CONTIGUOUS  # of the model inputs `prepare` makes (`fedlight.core.layout`)
    val_x: Tensor | None = None
    val_y: Tensor | None = None
    batch_size: int | None = None
    test_clients: Tensor | None = None

    def prepare(self, examples: Tensor) -> Tensor:
        """Model inputs from stored examples (a batch, or several clients' batches stacked), in
        the run's layout.

        Args:
            examples: stored examples (uint8 images where there is a `normalization`).

        Returns:
            The model's inputs.
        """
        inputs = examples if self.normalization is None else self.normalization(examples)
        return self.layout.inputs(inputs)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """The shape of one training example (what a model is built for)."""
        return tuple(self.train_x.shape[1:])

    def to(self, device: torch.device) -> "TensorDataset":
        """The dataset with its tensors on `device` (`train_clients`, `test_clients` stay on the
        CPU).

        Args:
            device: where the tensors go.

        Returns:
            A new dataset; this one is unchanged.
        """
        return TensorDataset(
            self.train_x.to(device),
            self.train_y.to(device),
            self.test_x.to(device),
            self.test_y.to(device),
            self.num_classes,
            self.augment,
            self.normalization,
            self.train_clients,
            self.layout,
            None if self.val_x is None else self.val_x.to(device),
            None if self.val_y is None else self.val_y.to(device),
            self.batch_size,
            self.test_clients,
        )


class DataSource(Protocol):
    """What `data._target_` names: a source whose `load()` gives the run its data."""

    def load(self) -> TensorDataset:
        """The run's data, loaded once before the partition.

        Returns:
            The train and test sets as whole tensors, with the number of classes.

        Raises:
            DataError: the data cannot be loaded; the message says which files to put where.
        """
