"""The CNN of McMahan et al. (AISTATS 2017): two 5×5 conv layers (32, 64) with 2×2 max pooling,
a 512-unit dense layer and softmax; "same" padding gives 1,663,370 parameters on MNIST."""

from torch import nn

from fedlight.models.classifier import Classifier, conv_output_size


class CNN(Classifier):
    def __init__(
        self,
        input_shape: tuple[int, ...],
        num_classes: int,
        lr: float,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        channels, height, width = input_shape
        h = conv_output_size(conv_output_size(height, 5, 2, 2), 5, 2, 2)
        w = conv_output_size(conv_output_size(width, 5, 2, 2), 5, 2, 2)
        net = nn.Sequential(
            nn.Conv2d(channels, 32, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(64 * h * w, 512),
            nn.ReLU(),
            nn.Linear(512, num_classes),
        )
        super().__init__(net, lr, momentum, weight_decay)
