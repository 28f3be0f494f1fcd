"""pfl-research's CIFAR-10 CNN (`simple_cnn` of its benchmarks, Granqvist et al., "pfl-research:
simulation framework for accelerating research in Private Federated Learning", arXiv 2404.06430):
two unpadded 3×3 conv layers (32, 64) with ReLU, one 2×2 max pooling, dropout 0.25, a 128-unit
dense layer, dropout 0.5, a linear classifier; Glorot-uniform weights, as its Keras twin.

The layers are in pfl-research's order (ReLU before the pooling), so that the same initial weights
and inputs give the same arithmetic as its definition. Its dropout makes the vectorized engine
refuse it (`fl.engine=vectorized` trains no model with dropout)."""

from torch import nn

from fedlight.core.errors import ConfigError
from fedlight.models.classifier import Classifier


class PflCNN(Classifier):
    def build_net(self, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        channels, height, width = input_shape
        pooled = ((height - 4) // 2, (width - 4) // 2)
        if min(pooled) < 1:
            raise ConfigError(
                f"model=pfl_cnn cannot take {height}×{width} images; "
                "choose a model for this data (e.g. model=mlp)"
            )
        net = nn.Sequential(
            nn.Conv2d(channels, 32, 3),
            nn.ReLU(),
            nn.Conv2d(32, 64, 3),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Dropout(0.25),
            nn.Flatten(),
            nn.Linear(64 * pooled[0] * pooled[1], 128),
            nn.ReLU(),
            nn.Dropout(0.5),
            nn.Linear(128, num_classes),
        )
        for layer in net:
            if isinstance(layer, nn.Conv2d | nn.Linear):
                nn.init.xavier_uniform_(layer.weight)
        return net
