"""The LightningModule every built-in model is: cross-entropy training and SGD from `optim.*`."""

import math

import pytorch_lightning as pl
import torch
from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812


class Classifier(pl.LightningModule):
    """Wraps a network; the FederatedLoop calls its hooks exactly as a Lightning Trainer would."""

    def __init__(self, net: nn.Module, lr: float, momentum: float, weight_decay: float) -> None:
        super().__init__()
        self.net = net
        self.lr = lr
        self.momentum = momentum
        self.weight_decay = weight_decay

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(
            self.parameters(), lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay
        )


def flat_size(input_shape: tuple[int, ...]) -> int:
    return math.prod(input_shape)


def conv_output_size(size: int, kernel: int, padding: int, pool: int) -> int:
    return (size + 2 * padding - kernel + 1) // pool
