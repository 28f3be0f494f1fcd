"""The seed tutorial's CIFAR-10 CNN: two 3×3 conv layers (32, 64, padding 1) each followed by 2×2
max pooling, a 256-unit dense layer and a linear classifier."""

from torch import nn

from fedlight.models.classifier import Classifier, conv_pool_layers, dense_layers


class CifarCNN(Classifier):
    def build_net(self, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        features, size = conv_pool_layers("cifar_cnn", input_shape, (32, 64), kernel=3, padding=1)
        return nn.Sequential(*features, *dense_layers(size, (256,), num_classes))
