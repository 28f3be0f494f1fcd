"""Evaluation as a stage: the metrics of a model on the test or the validation set.

As a Lightning Trainer runs them, a module's `test_step` runs on the test set and its
`validation_step` on the validation set, each between its `on_test_epoch_start`/`_end` (the
`on_validation_*` hooks); a split the module has no step for gets fedlight's metrics alone. The
numbers of each batch's returned dict (a Trainer logs none of it; fedlight leaves out the rest)
and every `self.log`/`self.log_dict` value are averaged over the split's examples (weighted by
batch size, or by `batch_size=` where given; a value logged at the epoch's end counts once); a
torchmetrics `Metric` object logged (`self.log("test_f1", self.f1)`) is updated by the module and
computed once over the whole evaluation, then reset, as a Trainer computes it at the end of an
epoch: the dataset-level value, not a mean of per-batch values. Every Metric of the module starts
each evaluation empty and computes on this process's data alone
(`fedlight.engines.module_logs.local_metrics`). Their names become columns of metrics.csv. The
split's accuracy and loss (`test_accuracy`, `test_loss`; `val_accuracy`, `val_loss`), where the
step does not report them, are those of the built-in models for a classifier (mean cross-entropy
and argmax accuracy of `forward`'s logits), and for a module that is no classifier (an
autoencoder: its `forward` gives no row of logits per example, or fails on a batch of inputs) its
own `training_step` loss, with no accuracy (NaN). Per-client test sets evaluate through the same
`evaluate` with another dataset, each client's evaluation with its own metrics."""

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor
from torch.nn import functional as F  # noqa: N812

from fedlight.core.errors import one_line
from fedlight.core.tensors import StateDict
from fedlight.engines.lightning import overrides
from fedlight.engines.module_logs import (
    Logs,
    as_number,
    computed,
    local_metrics,
    logging_to,
    unloggable,
)
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


def classifier_refusal(output: Any, batch: int, num_classes: int) -> str | None:
    """Why `forward`'s output for a batch gives no class logits to score, in words; None where
    it is one row of `num_classes` floats per example (an autoencoder's codes or a regression's
    values are no classes)."""
    shape = (batch, num_classes)
    if isinstance(output, Tensor) and output.is_floating_point() and output.shape == shape:
        return None
    found = f"shape {tuple(output.shape)}" if isinstance(output, Tensor) else type(output).__name__
    return f"its forward gives {found}, not {batch} rows of {num_classes} logits"


@dataclass
class Scores:
    """fedlight's own sums over a split: correct predictions and the loss."""

    correct: Tensor
    loss_sum: Tensor


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
        self.no_classifier: str | None = None  # why not, for the console

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
        zero = torch.zeros((), device=y.device)
        scores = Scores(zero.to(torch.int64), zero.to(torch.float64))
        own: dict[str, list[float]] = {}  # name → [Σ weight·value, Σ weight]
        logs = Logs()
        with local_metrics(module), logging_to(module, logs):
            self.call_hook(stage, "epoch_start")
            for batch_index, (bx, by) in enumerate(
                zip(x.split(self.batch_size), y.split(self.batch_size), strict=True)
            ):
                bx = self.prepare(bx)
                reported = self.step_metrics(stage, logs, (bx, by), batch_index) if stage else {}
                add_weighted(own, reported, len(by))
                if accuracy_name not in reported or loss_name not in reported:
                    self.score((bx, by), batch_index, logs, scores)
            self.call_hook(stage, "epoch_end")
            logged_once = {name: (as_number(v), len(y)) for name, (v, _) in logs.take().items()}
            add_weighted(own, logged_once, len(y))  # for the whole set
            metric_values = computed(logs.metrics)
        accuracy = scores.correct.item() / len(y) if self.classifier else math.nan
        metrics = {accuracy_name: accuracy, loss_name: scores.loss_sum.item() / len(y)}
        return metrics | {name: s / w for name, (s, w) in own.items()} | metric_values

    def score(
        self, batch: tuple[Tensor, Tensor], batch_index: int, logs: Logs, scores: Scores
    ) -> None:
        """Adds one batch to fedlight's own accuracy and loss: `forward`'s logits for a
        classifier, the training loss for any other module."""
        bx, by = batch
        logits = self.logits(bx, len(by))
        if logits is not None:
            scores.loss_sum += F.cross_entropy(logits, by, reduction="sum")
            scores.correct += (logits.argmax(dim=1) == by).sum()
        else:
            scores.loss_sum += self.training_loss(batch, batch_index, logs) * len(by)

    def logits(self, inputs: Tensor, count: int) -> Tensor | None:
        """`forward`'s logits for a batch of a classifier; None for a module that is none, known
        at its first batch: its forward gives no row of logits per example, or fails on a batch
        of inputs (Lightning's README autoencoder's takes flattened images): it is scored by its
        training loss, and `no_classifier` says why."""
        if self.classifier is False:
            return None
        if self.classifier:
            return self.module(inputs)
        assert self.num_classes is not None
        try:
            output = self.module(inputs)
        except Exception as error:  # noqa: BLE001 - a forward for other inputs: no classifier
            failure = f"{type(error).__name__}: {one_line(error, limit=200)}"
            self.no_classifier = f"its forward fails on a batch of inputs ({failure})"
        else:
            self.no_classifier = classifier_refusal(output, count, self.num_classes)
        self.classifier = self.no_classifier is None
        return output if self.classifier else None

    def training_loss(self, batch: tuple[Tensor, Tensor], batch_index: int, logs: Logs) -> Tensor:
        """A module that is no classifier and has no step of its own for the split is scored by
        its training loss (what it logs in that step is training's, and dropped)."""
        pending, metrics = logs.take(), dict(logs.metrics)
        logs.stepping = True  # its self.log calls take a training step's options
        try:
            loss = training_loss(self.module.training_step(batch, batch_index))
        finally:
            logs.stepping = False
        logs.pending, logs.metrics = pending, metrics
        return loss.detach().double()

    def call_hook(self, stage: str | None, moment: str) -> None:
        """`on_test_epoch_start`/`_end` (or `on_validation_...`) of a module with its own step."""
        if stage:
            getattr(self.module, f"on_{stage}_{moment}")()

    def step_metrics(
        self, stage: str, logs: Logs, batch: tuple[Tensor, Tensor], batch_index: int
    ) -> dict[str, tuple[float, int | None]]:
        """The values the module's own step logs for one batch, and the numbers of the dict it
        returns (the rest, a note or a tensor of predictions, a Trainer does not log either),
        each with the `batch_size=` it was logged with (None: the batch's)."""
        logs.evaluating_step = True
        try:
            returned = getattr(self.module, f"{stage}_step")(batch, batch_index)
        finally:
            logs.evaluating_step = False
        reported = {name: (as_number(v), size) for name, (v, size) in logs.take().items()}
        if isinstance(returned, dict):
            numbers = {n: v for n, v in returned.items() if unloggable(str(n), v) is None}
            reported |= {str(name): (as_number(v), None) for name, v in numbers.items()}
        return reported


def add_weighted(
    totals: dict[str, list[float]], values: dict[str, tuple[float, int | None]], count: int
) -> None:
    """Adds each value, weighted by its `batch_size=` (None: `count`, the batch's examples), to
    its name's [Σ weight·value, Σ weight]."""
    for name, (value, size) in values.items():
        weight = count if size is None else size
        total = totals.setdefault(name, [0.0, 0.0])
        total[0] += value * weight
        total[1] += weight
