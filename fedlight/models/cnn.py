"""The CNN of McMahan et al. (AISTATS 2017): two 5×5 conv layers (32, 64) with 2×2 max pooling,
a 512-unit dense layer and softmax; "same" padding gives 1,663,370 parameters on MNIST."""

from torch import nn

from fedlight.models.classifier import Classifier, conv_pool_layers, dense_layers


class CNN(Classifier):
    def build_net(self, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        features, size = conv_pool_layers("cnn", input_shape, (32, 64), kernel=5, padding=2)
        return nn.Sequential(*features, *dense_layers(size, (512,), num_classes))
