"""NIID-Bench's LeNet-style "simple-cnn" (Li et al., ICDE 2022): 5×5 conv layers with 6 and 16
channels, each followed by 2×2 max pooling, then dense layers of 120 and 84 units."""

from torch import nn

from fedlight.models.classifier import Classifier, conv_pool_layers, dense_layers


class SimpleCNN(Classifier):
    def build_net(self, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        features, size = conv_pool_layers("simple_cnn", input_shape, (6, 16), kernel=5, padding=0)
        return nn.Sequential(*features, *dense_layers(size, (120, 84), num_classes))
