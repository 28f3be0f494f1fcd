"""The "2NN" of McMahan et al. (AISTATS 2017): two hidden layers of 200 ReLU units."""

import math

from torch import nn

from fedlight.models.classifier import Classifier, dense_layers


class MLP(Classifier):
    def build_net(self, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        return nn.Sequential(
            nn.Flatten(), *dense_layers(math.prod(input_shape), (200, 200), num_classes)
        )
