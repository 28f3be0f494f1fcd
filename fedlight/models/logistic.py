"""Multinomial logistic regression: one linear layer from the flattened input to the class
logits, trained with the cross-entropy of its softmax; the convex model of FedProx's synthetic and
MNIST experiments (Li et al., MLSys 2020, Section 5.1; flearn/models/*/mclr.py in the authors'
code). Its weights start as theirs do (TensorFlow's dense layer: Glorot-uniform weights, zero
bias), drawn from the run's seed as every model's are."""

import math

from torch import nn

from fedlight.models.classifier import Classifier


class Logistic(Classifier):
    def build_net(self, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        linear = nn.Linear(math.prod(input_shape), num_classes)
        nn.init.xavier_uniform_(linear.weight)
        nn.init.zeros_(linear.bias)
        return nn.Sequential(nn.Flatten(), linear)
