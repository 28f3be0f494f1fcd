"""User LightningModules that break fedlight's assumptions, used as
`model._target_=tests.helpers.fault_modules.<name>` by the fault tests."""

from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812


class NoParameters(pl.LightningModule):
    """A fixed function of its input: nothing to train or average."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, **optim: Any) -> None:
        super().__init__()
        self.num_classes = num_classes

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(1)[:, : self.num_classes]

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)


class SkipsBatches(pl.LightningModule):
    """Returns None from training_step, which Lightning's Trainer reads as "skip this batch"."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, **optim: Any) -> None:
        super().__init__()
        self.layer = nn.Linear(int(torch.tensor(input_shape).prod()), num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.layer(x.flatten(1))

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        return None

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)
