"""LightningModules that use Lightning's own API as its docs write it (`self.optimizers()`,
`self.lr_schedulers()`, `self.global_rank`, `self.print`, `self.log` with torchmetrics), Lightning's
README autoencoder verbatim, and modules whose `self.log` names or memory layout could break
fedlight's bookkeeping. Named on the command line as `model._target_=tests.helpers.lightning_api.
<Name>`, as a user names theirs."""

from typing import Any, ClassVar

import lightning as L  # noqa: N812 - as Lightning's docs write it
import torch
import torch.nn.functional as F  # noqa: N812
from torch import Tensor, nn
from torchmetrics.classification.accuracy import Accuracy


# Lightning's README, "Step 1: Define a LightningModule", as it is written there.
class LitAutoEncoder(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(28 * 28, 128), nn.ReLU(), nn.Linear(128, 3))
        self.decoder = nn.Sequential(nn.Linear(3, 128), nn.ReLU(), nn.Linear(128, 28 * 28))

    def forward(self, x):
        # in lightning, forward defines the prediction/inference actions
        embedding = self.encoder(x)
        return embedding

    def training_step(self, batch, batch_idx):
        # training_step defines the train loop. It is independent of forward
        x, _ = batch
        x = x.view(x.size(0), -1)
        z = self.encoder(x)
        x_hat = self.decoder(z)
        loss = F.mse_loss(x_hat, x)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-3)
        return optimizer


class Softmax(L.LightningModule):
    """Softmax regression on 8×8 digits, SGD at lr 0.1: the base of the modules below."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(64, 10)

    def forward(self, x: Tensor) -> Tensor:
        return self.layer(x.flatten(1))

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class ReadsItsRate(Softmax):
    """Reads its optimizer's rate in training_step through `self.optimizers()` and its scheduler
    through `self.lr_schedulers()` at each epoch's end (StepLR halving per epoch), as Lightning's
    docs show; only rank 0 logs (`self.global_rank`, `self.local_rank`) and says so with
    `self.print`."""

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        if self.global_rank == 0 and self.local_rank == 0:
            self.log("seen_lr", self.optimizers().param_groups[0]["lr"])
        return super().training_step(batch, batch_idx)

    def on_train_epoch_end(self) -> None:
        self.log("scheduled_lr", self.lr_schedulers().get_last_lr()[0])
        self.print(f"epoch {self.current_epoch} done")

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": scheduler}


class CountsBatches(Softmax):
    """Records (hook, batch_idx, current_epoch, global_step) at each training hook that sees a
    batch index, and at the start and end of the fit."""

    calls: ClassVar[list[tuple[str, int | None, int, int]]] = []

    def record(self, hook: str, batch_idx: int | None = None) -> None:
        self.calls.append((hook, batch_idx, self.current_epoch, self.global_step))

    def on_train_start(self) -> None:
        self.record("on_train_start")

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        self.record("on_train_batch_start", batch_idx)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        self.record("training_step", batch_idx)
        return super().training_step(batch, batch_idx)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.record("on_train_batch_end", batch_idx)

    def on_train_epoch_end(self) -> None:
        self.record("on_train_epoch_end")

    def on_train_end(self) -> None:
        self.record("on_train_end")


class LogsInSetup(Softmax):
    def setup(self, stage: str) -> None:
        self.log("in_setup", 1.0)


class LogsInConfigureOptimizers(Softmax):
    def configure_optimizers(self) -> Any:
        self.log("in_configure", 1.0)
        return super().configure_optimizers()


class LogsFedlightsNames(Softmax):
    """A test_step logging the names of fedlight's own columns and summary numbers."""

    NAMES = ("round", "bytes_up", "comm_mb", "train_loss", "lr", "wall_seconds")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        for index, name in enumerate(self.NAMES):
            self.log(name, 1000.0 + index)


class UpdatedAccuracy(Softmax):
    """Lightning's common pattern: the Metric updated in training_step and logged as the object
    with `on_epoch=True` (on_step stays on there), and the same object under a second name."""

    def __init__(self) -> None:
        super().__init__()
        self.acc = Accuracy(task="multiclass", num_classes=10)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        logits = self(x)
        self.acc.update(logits.argmax(dim=1), y)
        self.log("train_acc", self.acc, on_epoch=True)
        self.log("same_acc", self.acc, on_step=False, on_epoch=True)
        return F.cross_entropy(logits, y)


class Convolution(L.LightningModule):
    """A small CNN on 8×8 digits that flattens its convolution's output with `x.view` only where
    `flattens` says: the step, mode or batch where a user's module happens to do it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, kernel_size=3, padding=1)
        self.fc = nn.Linear(4 * 8 * 8, 10)

    def flattens(self, batch_idx: int) -> bool:
        return False

    def features(self, x: Tensor, view: bool) -> Tensor:
        out = F.relu(self.conv(x))
        return self.fc(out.view(out.size(0), -1) if view else out.reshape(out.size(0), -1))

    def forward(self, x: Tensor) -> Tensor:
        return self.features(x, view=False)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        return F.cross_entropy(self.features(x, self.flattens(batch_idx)), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class ViewsInEvalMode(Convolution):
    def forward(self, x: Tensor) -> Tensor:
        return self.features(x, view=not self.training)


class ViewsInTestStep(Convolution):
    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("test_loss", F.cross_entropy(self.features(x, view=True), y))


class ViewsFromTheSecondBatch(Convolution):
    def flattens(self, batch_idx: int) -> bool:
        return batch_idx >= 1


# What a Trainer's modules do that fedlight must answer in one line or take as a Trainer does ------


class PositionalOnly(L.LightningModule):
    """Takes fedlight's offered arguments positionally only, the second with a default."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int = 3, /) -> None:
        super().__init__()
        self.layer = nn.Linear(int(torch.tensor(input_shape).prod()), num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.layer(x.flatten(1))

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class PlainModule(nn.Module):
    """A torch network, no LightningModule."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(64, 10)

    def forward(self, x: Tensor) -> Tensor:
        return self.layer(x.flatten(1))


class ReturnsText(Softmax):
    """Returns a note with its metrics from test_step, which a Trainer does not log."""

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> dict[str, Any]:
        x, _ = batch
        return {"test_note": "hello", "test_preds": self(x).argmax(1), "test_xent": 1.5}


class LogsWith(Softmax):
    """Logs `VALUE` under `NAME` in training_step with `OPTIONS`."""

    NAME: ClassVar[str] = "value"
    VALUE: ClassVar[Any] = 1.0
    OPTIONS: ClassVar[dict[str, Any]] = {}

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        self.log(self.NAME, self.VALUE, **self.OPTIONS)
        return super().training_step(batch, batch_idx)


class LogsNowhere(LogsWith):
    OPTIONS: ClassVar[dict[str, Any]] = {"on_step": False, "on_epoch": False}


class LogsHugeInt(LogsWith):
    VALUE: ClassVar[Any] = 10**400


class LogsComplexTensor(LogsWith):
    VALUE: ClassVar[Any] = torch.tensor(1 + 2j)


class LogsEmptyName(LogsWith):
    NAME: ClassVar[str] = ""


class LogsTwoLineName(LogsWith):
    NAME: ClassVar[str] = "multi\nline"


class LogsStepInEpochEnd(Softmax):
    def on_train_epoch_end(self) -> None:
        self.log("late", 1.0, on_step=True)


class LogsPerClassMetric(Softmax):
    """A Metric that computes one accuracy per class, logged as the object."""

    def __init__(self) -> None:
        super().__init__()
        self.per_class = Accuracy(task="multiclass", num_classes=10, average=None)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        logits = self(x)
        self.per_class(logits, y)
        self.log("per_class_acc", self.per_class)
        return F.cross_entropy(logits, y)
