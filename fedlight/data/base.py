"""The in-memory dataset every data source produces, and the shared normalization helper."""

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

BatchAugment = Callable[[Tensor, torch.Generator], Tensor]


class DataError(RuntimeError):
    """Data cannot be loaded; the message says which files to put where."""


@dataclass
class TensorDataset:
    """Train and test sets as whole tensors: batches are formed by indexing, never per sample."""

    train_x: Tensor
    train_y: Tensor
    test_x: Tensor
    test_y: Tensor
    num_classes: int
    augment: BatchAugment | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train_x.shape[1:])

    def to(self, device: torch.device) -> "TensorDataset":
        return TensorDataset(
            self.train_x.to(device),
            self.train_y.to(device),
            self.test_x.to(device),
            self.test_y.to(device),
            self.num_classes,
            self.augment,
        )


def normalize(images: Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> Tensor:
    """uint8 images (N, C, H, W) to float32 standardized per channel."""
    mean_t = torch.tensor(mean).view(1, -1, 1, 1)
    std_t = torch.tensor(std).view(1, -1, 1, 1)
    return (images.float() / 255.0 - mean_t).div_(std_t)
