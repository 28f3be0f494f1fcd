"""LightningModules and a DataModule written as their authors write them for a Trainer, with
`import lightning as L` (the import Lightning's docs use today); `tests/helpers/wild_modules_pl.py`
is the same code with `import pytorch_lightning as L`. Sized for sklearn's 8×8 digits (64 inputs,
10 classes): Lightning's README autoencoder, a lightning-hydra-template MNIST module, Lightning's
documented torchmetrics pattern and a DataModule with a validation loader."""

from typing import Any

import lightning as L  # noqa: N812 - as Lightning's docs write it
import torch
from lightning import LightningModule
from sklearn.datasets import load_digits
from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812
from torch.utils.data import DataLoader, TensorDataset, random_split
from torchmetrics import MaxMetric, MeanMetric
from torchmetrics.classification.accuracy import Accuracy


class LitAutoEncoder(L.LightningModule):
    """Lightning's README autoencoder: no constructor arguments, a 3-d code from `forward`, its
    loss logged as `train_loss`, no evaluation step."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 3))
        self.decoder = nn.Sequential(nn.Linear(3, 32), nn.ReLU(), nn.Linear(32, 64))

    def forward(self, x: Tensor) -> Tensor:
        return self.encoder(x.view(x.size(0), -1))

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, _ = batch
        x = x.view(x.size(0), -1)
        z = self.encoder(x)
        x_hat = self.decoder(z)
        loss = F.mse_loss(x_hat, x)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=1e-3)


class SimpleDenseNet(nn.Module):
    """The template's network, built by Hydra from the config (`model.net._target_`)."""

    def __init__(self, input_size: int = 64, lin1_size: int = 32, output_size: int = 10) -> None:
        super().__init__()
        self.model = nn.Sequential(
            nn.Linear(input_size, lin1_size), nn.ReLU(), nn.Linear(lin1_size, output_size)
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x.view(x.size(0), -1))


class MNISTLitModule(LightningModule):
    """The lightning-hydra-template's MNIST module: the network and a partial optimizer and
    scheduler from the config, `save_hyperparameters`, MeanMetric losses and Accuracy per split
    (training accuracy logged on_step and on_epoch), `configure_optimizers` reading
    `self.trainer.model` and `self.trainer.estimated_stepping_batches` (OneCycleLR per step)."""

    def __init__(
        self,
        net: nn.Module,
        optimizer: Any,
        scheduler: Any,
        compile: bool,  # the template's name
    ) -> None:
        super().__init__()
        self.save_hyperparameters(logger=False, ignore=["net"])
        self.net = net
        self.criterion = nn.CrossEntropyLoss()
        self.train_acc = Accuracy(task="multiclass", num_classes=10)
        self.val_acc = Accuracy(task="multiclass", num_classes=10)
        self.test_acc = Accuracy(task="multiclass", num_classes=10)
        self.train_loss = MeanMetric()
        self.val_loss = MeanMetric()
        self.test_loss = MeanMetric()
        self.val_acc_best = MaxMetric()

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def on_train_start(self) -> None:
        self.val_loss.reset()
        self.val_acc.reset()
        self.val_acc_best.reset()

    def model_step(self, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        x, y = batch
        logits = self.forward(x)
        loss = self.criterion(logits, y)
        preds = torch.argmax(logits, dim=1)
        return loss, preds, y

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        loss, preds, targets = self.model_step(batch)
        self.train_loss(loss)
        self.train_acc(preds, targets)
        self.log("train/loss", self.train_loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("train/acc", self.train_acc, on_step=True, on_epoch=True, prog_bar=True)
        return loss

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        loss, preds, targets = self.model_step(batch)
        self.val_loss(loss)
        self.val_acc(preds, targets)
        self.log("val/loss", self.val_loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("val/acc", self.val_acc, on_step=False, on_epoch=True, prog_bar=True)

    def on_validation_epoch_end(self) -> None:
        acc = self.val_acc.compute()
        self.val_acc_best(acc)
        self.log("val/acc_best", self.val_acc_best.compute(), sync_dist=True, prog_bar=True)

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        loss, preds, targets = self.model_step(batch)
        self.test_loss(loss)
        self.test_acc(preds, targets)
        self.log("test/loss", self.test_loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log("test/acc", self.test_acc, on_step=False, on_epoch=True, prog_bar=True)

    def setup(self, stage: str) -> None:
        if self.hparams.compile and stage == "fit":
            self.net = torch.compile(self.net)

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = self.hparams.optimizer(params=self.trainer.model.parameters())
        if self.hparams.scheduler is not None:
            scheduler = self.hparams.scheduler(
                optimizer=optimizer, total_steps=self.trainer.estimated_stepping_batches
            )
            return {
                "optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1},
            }
        return {"optimizer": optimizer}


class DocumentedAccuracy(L.LightningModule):
    """Lightning's documented torchmetrics pattern: the Metric called in training_step and logged
    as `train_acc_step`, the same object logged in on_train_epoch_end as `train_acc_epoch`; a
    `validation_step` only, logging `val_loss`."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(64, 10)
        self.accuracy = Accuracy(task="multiclass", num_classes=10)

    def forward(self, x: Tensor) -> Tensor:
        return self.layer(x.view(x.size(0), -1))

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        logits = self(x)
        self.accuracy(logits, y)
        self.log("train_acc_step", self.accuracy)
        return F.cross_entropy(logits, y)

    def on_train_epoch_end(self) -> None:
        self.log("train_acc_epoch", self.accuracy)

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class DigitsDataModule(L.LightningDataModule):
    """A DataModule as Lightning's docs write one: `setup` splits the training part into
    training and validation sets, each loader at the module's `batch_size`."""

    def __init__(self, batch_size: int = 64, val_size: int = 200) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.val_size = val_size

    def setup(self, stage: str) -> None:
        x, y = load_digits(return_X_y=True)
        full = TensorDataset(torch.tensor(x, dtype=torch.float32) / 16, torch.tensor(y))
        fit, self.test_set = random_split(full, [1497, 300], torch.Generator().manual_seed(0))
        train_size = len(fit) - self.val_size
        generator = torch.Generator().manual_seed(1)
        self.train_set, self.val_set = random_split(fit, [train_size, self.val_size], generator)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=self.batch_size)
