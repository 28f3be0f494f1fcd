"""The "2NN" of McMahan et al. (AISTATS 2017): two hidden layers of 200 ReLU units."""

from torch import nn

from fedlight.models.classifier import Classifier, flat_size


class MLP(Classifier):
    def __init__(
        self,
        input_shape: tuple[int, ...],
        num_classes: int,
        lr: float,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        hidden: int = 200,
    ) -> None:
        net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(flat_size(input_shape), hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )
        super().__init__(net, lr, momentum, weight_decay)
