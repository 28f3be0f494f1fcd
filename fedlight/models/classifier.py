"""The LightningModule every built-in model is: cross-entropy training and SGD from `optim.*`."""

import pytorch_lightning as pl
import torch
from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812

from fedlight.core.errors import ConfigError


class Classifier(pl.LightningModule):
    """A network from `build_net`; the FederatedLoop calls its hooks as a Lightning Trainer does."""

    def __init__(
        self,
        input_shape: tuple[int, ...],
        num_classes: int,
        lr: float,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__()
        # the init arguments in a Lightning checkpoint (model.ckpt): `load_from_checkpoint`
        # builds the model again without being told them
        self.save_hyperparameters()
        self.net = self.build_net(tuple(input_shape), num_classes)
        self.lr = lr
        self.momentum = momentum
        self.weight_decay = weight_decay

    def build_net(self, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(
            self.parameters(), lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay
        )


def conv_pool_layers(
    model: str, input_shape: tuple[int, ...], channels: tuple[int, ...], kernel: int, padding: int
) -> tuple[list[nn.Module], int]:
    """conv → ReLU → 2×2 max-pool blocks, then flatten; also the number of features they yield.

    Each block pools before its ReLU: both are monotone, so max-pooling the ReLU's outputs and
    applying the ReLU to the pooled values give the same values and the same gradients, bit for
    bit (tested), with the ReLU on a quarter of the elements. (Not in place: a full backward hook
    on a layer, as DP and selection use, forbids modifying its output.) The blocks' parameters
    are those of conv → ReLU → pool (docs/speed-and-memory.md)."""
    in_channels, height, width = input_shape
    layers: list[nn.Module] = []
    for out_channels in channels:
        layers.append(nn.Conv2d(in_channels, out_channels, kernel, padding=padding))
        layers += [nn.MaxPool2d(2), nn.ReLU()]
        in_channels = out_channels
        height = (height + 2 * padding - kernel + 1) // 2
        width = (width + 2 * padding - kernel + 1) // 2
        if height < 1 or width < 1:
            raise ConfigError(
                f"model={model} cannot take {input_shape[1]}×{input_shape[2]} images; "
                "choose a model for this data (e.g. model=mlp)"
            )
    return [*layers, nn.Flatten()], in_channels * height * width


def dense_layers(features: int, hidden: tuple[int, ...], num_classes: int) -> list[nn.Module]:
    """Linear → ReLU for each hidden width, then the linear classifier."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(features, width), nn.ReLU()]
        features = width
    return [*layers, nn.Linear(features, num_classes)]
