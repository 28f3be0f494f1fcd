"""A LightningModule of one's own as the client model (docs/howto/own-model.md): a small CNN for
8×8 digits that logs its training accuracy and is evaluated by its own `test_step`, with the
macro-averaged F1 score of torchmetrics computed over the whole test set.

fedlight builds it with the data's `input_shape` and `num_classes` and `optim.*`'s `lr`,
`momentum`, `weight_decay` (the YAML passes them), and calls its hooks as a Trainer would, one
client at a time (README, "Your own model").
"""

import pytorch_lightning as pl
import torch
from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812
from torchmetrics.classification import MulticlassF1Score


class DigitsCNN(pl.LightningModule):
    def __init__(
        self,
        input_shape: tuple[int, ...],
        num_classes: int,
        lr: float,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__()
        # in model.ckpt, so that `DigitsCNN.load_from_checkpoint(path)` needs no arguments
        self.save_hyperparameters()
        self.features = nn.Sequential(
            nn.Conv2d(input_shape[0], 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),  # not `.view`: on the CPU fedlight hands convolutions channels-last
        )
        height, width = input_shape[1] // 4, input_shape[2] // 4
        self.head = nn.Linear(32 * height * width, num_classes)
        # A Metric object logged as it is: computed once over all test batches, then reset
        self.test_f1 = MulticlassF1Score(num_classes, average="macro")

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        logits = self(x)
        # a column of metrics.csv: the round's mean over its participants' steps
        self.log("train_acc", (logits.argmax(dim=1) == y).float().mean(), batch_size=len(y))
        return F.cross_entropy(logits, y)

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        x, y = batch
        self.test_f1.update(self(x), y)
        # a column of metrics.csv; test_accuracy and test_loss, which this module does not log,
        # are fedlight's argmax accuracy and cross-entropy of `forward`'s logits
        self.log("test_f1", self.test_f1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(
            self.parameters(),
            lr=self.hparams.lr,
            momentum=self.hparams.momentum,
            weight_decay=self.hparams.weight_decay,
        )
