"""Users' LightningModules written as for a Lightning Trainer (`model._target_=tests.lightning_
modules.<Name>`): torchmetrics in test_step, self.log in training_step, lr schedulers, gradient
clipping; `Recorder` modules record what was called, for the tests to compare."""

from typing import Any, ClassVar

import pytorch_lightning as pl
import torch
from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score


class Linear(pl.LightningModule):
    """Softmax regression with SGD at lr 0.1."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, **optim: Any) -> None:
        super().__init__()
        self.layer = nn.Linear(int(torch.tensor(input_shape).prod()), num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.layer(x.flatten(1))

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class MetricsModule(Linear):
    """Lightning's documented torchmetrics patterns: macro F1 updated in test_step and logged as
    the Metric object; accuracy called (forward) and logged as the object, under the name of the
    fixed column; a second F1 computed in on_test_epoch_end. In training: the loss, the mean
    label (a value known by hand) as a tensor and through a MeanMetric, and a Python number."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, **optim: Any) -> None:
        super().__init__(input_shape, num_classes)
        self.f1 = MulticlassF1Score(num_classes, average="macro")
        self.epoch_f1 = MulticlassF1Score(num_classes, average="macro")
        self.accuracy = MulticlassAccuracy(num_classes, average="micro")
        self.label_mean = MeanMetric()

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("my_loss", loss)
        self.log_dict({"label_mean": y.double().mean(), "one": 1.0})
        self.label_mean.update(y.double())
        self.log("label_mean_metric", self.label_mean)
        return loss

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        x, y = batch
        predictions = self(x).argmax(dim=1)
        self.f1.update(predictions, y)
        self.log("test_f1", self.f1)
        self.accuracy(predictions, y)
        self.log("test_accuracy", self.accuracy)
        self.epoch_f1.update(predictions, y)

    def on_test_epoch_end(self) -> None:
        self.log("test_f1_epoch_end", self.epoch_f1.compute())
        self.epoch_f1.reset()


class Recorder(Linear):
    """Records every training hook fedlight calls (and a Trainer calls) with the learning rate of
    each optimizer step; `SCHEDULER` builds its lr_scheduler entry (None: none)."""

    HOOKS = (
        "on_train_start",
        "on_train_epoch_start",
        "on_train_batch_start",
        "on_before_zero_grad",
        "on_before_backward",
        "on_after_backward",
        "on_train_batch_end",
        "on_train_epoch_end",
        "on_train_end",
    )
    calls: ClassVar[list[str]] = []
    lrs: ClassVar[list[float]] = []
    SCHEDULER: ClassVar[Any] = None

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, **optim: Any) -> None:
        super().__init__(input_shape, num_classes)
        for hook in self.HOOKS:
            setattr(self, hook, self.recording(hook))

    def recording(self, hook: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> None:
            self.calls.append(hook)

        return record

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        self.calls.append("training_step")
        return super().training_step(batch, batch_idx)

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        self.calls.append("on_before_optimizer_step")
        self.lrs.append(optimizer.param_groups[0]["lr"])

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        self.calls.append("configure_gradient_clipping")
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        self.calls.append("lr_scheduler_step")
        super().lr_scheduler_step(scheduler, metric)

    def configure_optimizers(self) -> Any:
        self.calls.append("configure_optimizers")
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        if self.SCHEDULER is None:
            return optimizer
        return type(self).SCHEDULER(optimizer)


def halving_per_epoch(optimizer: torch.optim.Optimizer) -> Any:
    """The dict form with a bare scheduler: StepLR halving the rate after every epoch."""
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    return {"optimizer": optimizer, "lr_scheduler": scheduler}


def halving_every_two_steps(optimizer: torch.optim.Optimizer) -> Any:
    """The dict form with a scheduler config: interval step, frequency 2."""
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    config = {"scheduler": scheduler, "interval": "step", "frequency": 2}
    return {"optimizer": optimizer, "lr_scheduler": config}


def warmup_lists(optimizer: torch.optim.Optimizer) -> Any:
    """The two-lists form: a linear warm-up over 4 steps (computed from its base rate)."""
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.25, total_iters=4)
    return [optimizer], [{"scheduler": scheduler, "interval": "step"}]


class EpochHalving(Recorder):
    SCHEDULER = halving_per_epoch


class StepHalving(Recorder):
    SCHEDULER = halving_every_two_steps


class Warmup(Recorder):
    SCHEDULER = warmup_lists


class CountsSchedulerSteps(Linear):
    """Halves its rate per epoch (no other hook, as DP-SGD's engine needs) and counts the
    scheduler's steps."""

    steps: ClassVar[list[float]] = []

    def configure_optimizers(self) -> Any:
        return halving_per_epoch(torch.optim.SGD(self.parameters(), lr=0.1))

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        super().lr_scheduler_step(scheduler, metric)
        self.steps.append(scheduler.get_last_lr()[0])


class ValueClipping(Linear):
    """Clips every gradient entry to CLIP itself, in configure_gradient_clipping."""

    CLIP = 1e-3

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        self.clip_gradients(optimizer, gradient_clip_val=self.CLIP, gradient_clip_algorithm="value")


class Plateau(Linear):
    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
        return {"optimizer": optimizer, "lr_scheduler": scheduler, "monitor": "train_loss"}


class LogsTrainLoss(Linear):
    """Logs under the name of fedlight's own train_loss column."""

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("train_loss", loss)
        return loss


class SumsItsLogs(Linear):
    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("loss_sum", loss, reduce_fx="sum")
        return loss


class LogsText(Linear):
    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        self.log("s", "abc")
        return super().training_step(batch, batch_idx)


class LogsPerClass(Linear):
    """Logs a vector, which a Trainer refuses (one element per logged value)."""

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        _, y = batch
        self.log("per_class", torch.bincount(y, minlength=self.layer.out_features).float())


class ManualOptimization(Linear):
    def __init__(self, input_shape: tuple[int, ...], num_classes: int, **optim: Any) -> None:
        super().__init__(input_shape, num_classes)
        self.automatic_optimization = False


class OwnOptimizerStep(Linear):
    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        super().optimizer_step(*args, **kwargs)


class SkipsEpochs(Linear):
    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int:
        return -1


class BuiltInSetup(pl.LightningModule):
    """Builds its layer in setup(), as Lightning's docs suggest for layers that need data."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, **optim: Any) -> None:
        super().__init__()
        self.shape = (int(torch.tensor(input_shape).prod()), num_classes)

    def setup(self, stage: str) -> None:
        self.layer = nn.Linear(*self.shape)

    def forward(self, x: Tensor) -> Tensor:
        return self.layer(x.flatten(1))

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)
