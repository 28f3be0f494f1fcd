"""Evaluation as a stage: the test metrics of a model.

A module that defines its own `test_step` (or else `validation_step`) is evaluated by it, as a
Lightning Trainer would: each batch's returned dict and every `self.log`/`self.log_dict` value are
collected and averaged over the test examples (weighted by batch size). Its names become columns of
metrics.csv; `test_accuracy` and `test_loss`, if it does not report them, are computed as for the
built-in models: mean cross-entropy and argmax accuracy of `forward`'s logits. Per-client test sets
(a later issue) evaluate through the same `evaluate` with another dataset.
"""

from collections.abc import Callable
from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor
from torch.nn import functional as F  # noqa: N812

from fedlight.tensors import StateDict

ACCURACY, LOSS = "test_accuracy", "test_loss"


def own_step(module: pl.LightningModule) -> Callable[..., Any] | None:
    """The module's own `test_step`, else its own `validation_step`, else None."""
    for name in ("test_step", "validation_step"):
        if getattr(type(module), name) is not getattr(pl.LightningModule, name):
            return getattr(module, name)
    return None


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
        self.step = own_step(module)

    @torch.no_grad()
    def evaluate(self, weights: StateDict, x: Tensor, y: Tensor) -> dict[str, float]:
        module = self.module
        module.load_state_dict(weights)
        module.eval()
        correct = torch.zeros((), dtype=torch.int64, device=y.device)
        loss_sum = torch.zeros((), dtype=torch.float64, device=y.device)
        own: dict[str, float] = {}
        for batch_index, (bx, by) in enumerate(
            zip(x.split(self.batch_size), y.split(self.batch_size), strict=True)
        ):
            bx = self.prepare(bx)
            reported = self.step_metrics((bx, by), batch_index) if self.step else {}
            for name, value in reported.items():
                own[name] = own.get(name, 0.0) + value * len(by)
            if ACCURACY not in reported or LOSS not in reported:
                logits = module(bx)
                loss_sum += F.cross_entropy(logits, by, reduction="sum")
                correct += (logits.argmax(dim=1) == by).sum()
        count = len(y)
        metrics = {ACCURACY: correct.item() / count, LOSS: loss_sum.item() / count}
        return metrics | {name: total / count for name, total in own.items()}

    def step_metrics(self, batch: tuple[Tensor, Tensor], batch_index: int) -> dict[str, float]:
        """The values the module's own step returns or logs for one batch."""
        logged: dict[str, float] = {}
        module = self.module

        def log(name: str, value: Any, *args: Any, **kwargs: Any) -> None:
            logged[name] = float(torch.as_tensor(value).detach().double().mean())

        def log_dict(values: dict[str, Any], *args: Any, **kwargs: Any) -> None:
            for name, value in values.items():
                log(name, value)

        module.log, module.log_dict = log, log_dict  # type: ignore[method-assign]
        try:
            returned = self.step(batch, batch_index)  # type: ignore[misc]
        finally:
            del module.log, module.log_dict
        if isinstance(returned, dict):
            logged |= {
                k: float(torch.as_tensor(v).detach().double().mean()) for k, v in returned.items()
            }
        return logged
