"""LEAF's Shakespeare model (Caldas et al. 2018, LEAF's models/shakespeare/stacked_lstm.py; the
character LSTM of McMahan et al. 2017): each character index embedded in 8 dimensions, two LSTM
layers of 256 units, and a linear classifier of the last step's output over the vocabulary, whose
size is the number of classes (inputs and labels share LEAF's 80 characters). Its accuracy is
next-character accuracy: the share of examples whose following character is the argmax.

TensorFlow's BasicLSTMCell, which LEAF stacks, adds 1 to the forget gate's pre-activation and
starts its biases at 0; here the forget gate's input bias starts at 1 and every other bias at 0,
the same function at initialization. Weights keep PyTorch's initialization, and PyTorch's LSTM
has two bias vectors per layer where TensorFlow's has one (their sum): 819,920 parameters for
LEAF's 817,872, the same functions."""

import math

from torch import Tensor, nn

from fedlight.core.errors import ConfigError
from fedlight.models.classifier import Classifier

EMBEDDING, HIDDEN, LAYERS = 8, 256, 2
FORGET_BIAS = 1.0


class CharacterLSTM(nn.Module):
    """Embedding → stacked LSTM → the classifier of the last step's output."""

    def __init__(self, vocabulary: int, embedding: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocabulary, embedding)
        self.lstm = nn.LSTM(embedding, hidden, num_layers=layers, batch_first=True)
        self.classifier = nn.Linear(hidden, vocabulary)
        for name, bias in self.lstm.named_parameters():
            if name.startswith("bias"):
                nn.init.zeros_(bias)
                if name.startswith("bias_ih"):  # gates in PyTorch's order: input, forget, ...
                    nn.init.constant_(bias[hidden : 2 * hidden], FORGET_BIAS)

    def forward(self, x: Tensor) -> Tensor:
        outputs, _ = self.lstm(self.embedding(x))
        return self.classifier(outputs[:, -1])


class StackedLSTM(Classifier):
    def build_net(self, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        if len(input_shape) != 1:
            raise ConfigError(
                f"model=stacked_lstm reads sequences of character indices and the data's examples "
                f"have shape {input_shape} (here {math.prod(input_shape)} numbers each); use it "
                "with data=leaf_shakespeare"
            )
        return CharacterLSTM(num_classes, EMBEDDING, HIDDEN, LAYERS)
