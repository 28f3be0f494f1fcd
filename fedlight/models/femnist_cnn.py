"""LEAF's FEMNIST CNN (Caldas et al. 2018, LEAF's models/femnist/cnn.py): two 5×5 conv layers
(32, 64, "same" padding) each followed by 2×2 max pooling, a 2048-unit dense layer and a linear
classifier; 6,603,710 parameters for FEMNIST's 62 classes."""

from torch import nn

from fedlight.models.classifier import Classifier, conv_pool_layers, dense_layers


class FemnistCNN(Classifier):
    def build_net(self, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        features, size = conv_pool_layers("femnist_cnn", input_shape, (32, 64), kernel=5, padding=2)
        return nn.Sequential(*features, *dense_layers(size, (2048,), num_classes))
