"""NIID-Bench's LeNet-style "simple-cnn" (Li et al., ICDE 2022): 5×5 conv layers with 6 and 16
channels, each followed by 2×2 max pooling, then dense layers of 120 and 84 units."""

from torch import nn

from fedlight.config import ConfigError
from fedlight.models.classifier import Classifier, conv_output_size


class SimpleCNN(Classifier):
    def __init__(
        self,
        input_shape: tuple[int, ...],
        num_classes: int,
        lr: float,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        channels, height, width = input_shape
        h = conv_output_size(conv_output_size(height, 5, 0, 2), 5, 0, 2)
        w = conv_output_size(conv_output_size(width, 5, 0, 2), 5, 0, 2)
        if h < 1 or w < 1:
            raise ConfigError(
                f"model=simple_cnn needs images of at least 16×16, got {input_shape}; "
                "choose model=mlp or model=cnn for this data"
            )
        net = nn.Sequential(
            nn.Conv2d(channels, 6, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(16 * h * w, 120),
            nn.ReLU(),
            nn.Linear(120, 84),
            nn.ReLU(),
            nn.Linear(84, num_classes),
        )
        super().__init__(net, lr, momentum, weight_decay)
