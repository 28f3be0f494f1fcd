"""Evaluation as a stage: the metrics of a model on the test or the validation set.

As a Lightning Trainer runs them, a module's `test_step` runs on the test set and its
`validation_step` on the validation set, each between its `on_test_epoch_start`/`_end` (the
`on_validation_*` hooks); a split the module has no step for gets fedlight's metrics alone. Each
batch's returned dict and every `self.log`/`self.log_dict` value are averaged over the split's
examples (weighted by batch size, or by `batch_size=` where given; a value logged at the epoch's end
counts once); a torchmetrics `Metric` object logged (`self.log("test_f1", self.f1)`) is updated by
the module and computed once over the whole evaluation, then reset, as a Trainer computes it at the
end of an epoch: the dataset-level value, not a mean of per-batch values. Every Metric of the module
starts each evaluation empty and computes on this process's data alone
(`fedlight.engines.module_logs.local_metrics`). Their names become columns of metrics.csv. The
split's accuracy and loss (`test_accuracy`, `test_loss`; `val_accuracy`, `val_loss`), where the step
does not report them, are those of the built-in models for a classifier (mean cross-entropy and
argmax accuracy of `forward`'s logits), and for a module that is no classifier (an autoencoder) its
own `training_step` loss, with no accuracy (NaN). Per-client test sets evaluate through the same
`evaluate` with another dataset, each client's evaluation with its own metrics."""

import math
from collections.abc import Callable
from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor
from torch.nn import functional as F  # noqa: N812

from fedlight.core.tensors import StateDict
from fedlight.engines.lightning import overrides
from fedlight.engines.module_logs import Logs, as_number, computed, local_metrics, logging_to
from fedlight.engines.sequential import training_loss

ACCURACY, LOSS = "test_accuracy", "test_loss"
# The validation set's columns: `val_accuracy`, `val_loss`, and a module's own names
VALIDATION_PREFIX = "val_"
VAL_ACCURACY, VAL_LOSS = "val_accuracy", "val_loss"
# fedlight's own (accuracy, loss) columns of each split a module is evaluated on
SPLIT_METRICS = {"test": (ACCURACY, LOSS), "validation": (VAL_ACCURACY, VAL_LOSS)}


def own_stage(module: pl.LightningModule, split: str) -> str | None:
    """The module's own step for `split`, as a Trainer runs it: `test_step` on the test set,
    `validation_step` on the validation set; None where the module defines no such step."""
    return split if overrides(module, f"{split}_step") else None


def is_classifier(output: Any, batch: int, num_classes: int) -> bool:
    """Whether `forward` gave class logits for a batch: one row of `num_classes` floats per
    example (an autoencoder's codes or a regression's values are no classes to score)."""
    shape = (batch, num_classes)
    return isinstance(output, Tensor) and output.is_floating_point() and output.shape == shape


class Evaluator:
    """Metrics of weights loaded into the client module, on the split's tensors given."""

    def __init__(
        self,
        module: pl.LightningModule,
        batch_size: int,
        prepare: Callable[[Tensor], Tensor] = lambda examples: examples,
        num_classes: int | None = None,
    ) -> None:
        """`prepare`: model inputs from a batch of stored examples (the dataset's);
        `num_classes`: the labels' (None: every module is taken for a classifier)."""
        self.module = module
        self.batch_size = batch_size
        self.prepare = prepare
        self.num_classes = num_classes
        self.classifier: bool | None = None if num_classes else True  # known at its first batch

    @torch.inference_mode()
    def evaluate(
        self, weights: StateDict, x: Tensor, y: Tensor, split: str = "test"
    ) -> dict[str, float]:
        """The metrics of `split` (test or validation): the module's own step's, and fedlight's
        accuracy and loss where the step does not report them: those of `forward`'s logits for a
        classifier, else the loss only, `training_step`'s."""
        module = self.module
        module.load_state_dict(weights)
        module.eval()
        stage = own_stage(module, split)
        accuracy_name, loss_name = SPLIT_METRICS[split]
        correct = torch.zeros((), dtype=torch.int64, device=y.device)
        loss_sum = torch.zeros((), dtype=torch.float64, device=y.device)
        count = len(y)
        own: dict[str, list[float]] = {}  # name → [Σ weight·value, Σ weight]
        logs = Logs()
        with local_metrics(module), logging_to(module, logs):
            self.call_hook(stage, "epoch_start")
            for batch_index, (bx, by) in enumerate(
                zip(x.split(self.batch_size), y.split(self.batch_size), strict=True)
            ):
                bx = self.prepare(bx)
                reported = self.step_metrics(stage, logs, (bx, by), batch_index) if stage else {}
                for name, (value, weight) in reported.items():
                    total = own.setdefault(name, [0.0, 0.0])
                    total[0] += value * (len(by) if weight is None else weight)
                    total[1] += len(by) if weight is None else weight
                if accuracy_name in reported and loss_name in reported:
                    continue
                if self.classifier is not False:
                    logits = module(bx)
                    if self.classifier is None:
                        self.classifier = is_classifier(logits, len(by), self.num_classes)
                if self.classifier:
                    loss_sum += F.cross_entropy(logits, by, reduction="sum")
                    correct += (logits.argmax(dim=1) == by).sum()
                else:
                    loss_sum += self.training_loss((bx, by), batch_index, logs) * len(by)
            self.call_hook(stage, "epoch_end")
            for name, (value, _) in logs.take().items():  # logged once, for the whole set
                total = own.setdefault(name, [0.0, 0.0])
                total[0] += as_number(value) * count
                total[1] += count
            metric_values = {name: computed(metric) for name, metric in logs.metrics.items()}
        accuracy = correct.item() / count if self.classifier else math.nan
        metrics = {accuracy_name: accuracy, loss_name: loss_sum.item() / count}
        return metrics | {name: s / w for name, (s, w) in own.items()} | metric_values

    def training_loss(self, batch: tuple[Tensor, Tensor], batch_index: int, logs: Logs) -> Tensor:
        """A module that is no classifier and has no step of its own for the split is scored by
        its training loss (what it logs in that step is training's, and dropped)."""
        pending, metrics = logs.take(), dict(logs.metrics)
        loss = training_loss(self.module.training_step(batch, batch_index))
        logs.pending, logs.metrics = pending, metrics
        return loss.detach().double()

    def call_hook(self, stage: str | None, moment: str) -> None:
        """`on_test_epoch_start`/`_end` (or `on_validation_...`) of a module with its own step."""
        if stage:
            getattr(self.module, f"on_{stage}_{moment}")()

    def step_metrics(
        self, stage: str, logs: Logs, batch: tuple[Tensor, Tensor], batch_index: int
    ) -> dict[str, tuple[float, int | None]]:
        """The values the module's own step returns or logs for one batch, each with the
        `batch_size=` it was logged with (None: the batch's)."""
        returned = getattr(self.module, f"{stage}_step")(batch, batch_index)
        reported = {name: (as_number(v), size) for name, (v, size) in logs.take().items()}
        if isinstance(returned, dict):
            reported |= {name: (as_number(v), None) for name, v in returned.items()}
        return reported
