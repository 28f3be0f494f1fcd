"""Evaluation as a stage: the test metrics of a model.

A module that defines its own `test_step` (or else `validation_step`) is evaluated by it, as a
Lightning Trainer's `test` would: `on_test_epoch_start`, the step per batch, `on_test_epoch_end`
(the `on_validation_*` hooks with `validation_step`). Each batch's returned dict and every
`self.log`/`self.log_dict` value are averaged over the test examples (weighted by batch size, or
by `batch_size=` where given; a value logged at the epoch's end counts once); a torchmetrics
`Metric` object logged (`self.log("test_f1", self.f1)`) is updated by the module and computed
once over the whole evaluation, then reset, as a Trainer computes it at the end of an epoch: the
dataset-level value, not a mean of per-batch values. Every Metric of the module starts each
evaluation empty and computes on this process's data alone
(`fedlight.engines.lightning.local_metrics`). Their names become columns of metrics.csv;
`test_accuracy` and `test_loss`, if it does not report them, are computed as for the built-in
models: mean cross-entropy and argmax accuracy of `forward`'s logits. Per-client test sets evaluate
through the same `evaluate` with another dataset, each client's evaluation with its own metrics.
"""

from collections.abc import Callable

import pytorch_lightning as pl
import torch
from torch import Tensor
from torch.nn import functional as F  # noqa: N812

from fedlight.core.tensors import StateDict
from fedlight.engines.lightning import (
    Logs,
    as_number,
    computed,
    local_metrics,
    logging_to,
    overrides,
)

ACCURACY, LOSS = "test_accuracy", "test_loss"
# The validation set's columns: `val_accuracy`, `val_loss`, `val_<a module's own metric>`
VALIDATION_PREFIX = "val_"
VAL_ACCURACY, VAL_LOSS = "val_accuracy", "val_loss"


def own_stage(module: pl.LightningModule) -> str | None:
    """ "test" where the module defines its own `test_step`, else "validation" where it defines
    its own `validation_step`, else None."""
    return next((s for s in ("test", "validation") if overrides(module, f"{s}_step")), None)


class Evaluator:
    """Test metrics of weights loaded into the client module, on the test tensors given."""

    def __init__(
        self,
        module: pl.LightningModule,
        batch_size: int,
        prepare: Callable[[Tensor], Tensor] = lambda examples: examples,
    ) -> None:
        """`prepare`: model inputs from a batch of stored examples (the dataset's)."""
        self.module = module
        self.batch_size = batch_size
        self.prepare = prepare
        self.stage = own_stage(module)

    @torch.inference_mode()
    def evaluate(self, weights: StateDict, x: Tensor, y: Tensor) -> dict[str, float]:
        module = self.module
        module.load_state_dict(weights)
        module.eval()
        correct = torch.zeros((), dtype=torch.int64, device=y.device)
        loss_sum = torch.zeros((), dtype=torch.float64, device=y.device)
        count = len(y)
        own: dict[str, list[float]] = {}  # name → [Σ weight·value, Σ weight]
        logs = Logs()
        with local_metrics(module), logging_to(module, logs):
            self.call_hook("epoch_start")
            for batch_index, (bx, by) in enumerate(
                zip(x.split(self.batch_size), y.split(self.batch_size), strict=True)
            ):
                bx = self.prepare(bx)
                reported = self.step_metrics(logs, (bx, by), batch_index) if self.stage else {}
                for name, (value, weight) in reported.items():
                    total = own.setdefault(name, [0.0, 0.0])
                    total[0] += value * (len(by) if weight is None else weight)
                    total[1] += len(by) if weight is None else weight
                if ACCURACY not in reported or LOSS not in reported:
                    logits = module(bx)
                    loss_sum += F.cross_entropy(logits, by, reduction="sum")
                    correct += (logits.argmax(dim=1) == by).sum()
            self.call_hook("epoch_end")
            for name, (value, _) in logs.take().items():  # logged once, for the whole set
                total = own.setdefault(name, [0.0, 0.0])
                total[0] += as_number(value) * count
                total[1] += count
            metric_values = {name: computed(metric) for name, metric in logs.metrics.items()}
        metrics = {ACCURACY: correct.item() / count, LOSS: loss_sum.item() / count}
        return metrics | {name: s / w for name, (s, w) in own.items()} | metric_values

    def call_hook(self, moment: str) -> None:
        """`on_test_epoch_start`/`_end` (or `on_validation_...`) of a module with its own step."""
        if self.stage:
            getattr(self.module, f"on_{self.stage}_{moment}")()

    def step_metrics(
        self, logs: Logs, batch: tuple[Tensor, Tensor], batch_index: int
    ) -> dict[str, tuple[float, int | None]]:
        """The values the module's own step returns or logs for one batch, each with the
        `batch_size=` it was logged with (None: the batch's)."""
        returned = getattr(self.module, f"{self.stage}_step")(batch, batch_index)
        reported = {name: (as_number(v), size) for name, (v, size) in logs.take().items()}
        if isinstance(returned, dict):
            reported |= {name: (as_number(v), None) for name, v in returned.items()}
        return reported
