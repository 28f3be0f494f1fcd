"""The seed tutorial's CIFAR-10 CNN: two 3×3 conv layers (32, 64, padding 1) each followed by 2×2
max pooling, a 256-unit dense layer and a linear classifier."""

from torch import nn

from fedlight.models.classifier import Classifier, conv_output_size


class CifarCNN(Classifier):
    def __init__(
        self,
        input_shape: tuple[int, ...],
        num_classes: int,
        lr: float,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        channels, height, width = input_shape
        h = conv_output_size(conv_output_size(height, 3, 1, 2), 3, 1, 2)
        w = conv_output_size(conv_output_size(width, 3, 1, 2), 3, 1, 2)
        net = nn.Sequential(
            nn.Conv2d(channels, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(64 * h * w, 256),
            nn.ReLU(),
            nn.Linear(256, num_classes),
        )
        super().__init__(net, lr, momentum, weight_decay)
