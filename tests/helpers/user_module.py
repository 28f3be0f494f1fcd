"""A user's own LightningModule, used as
`model._target_=tests.helpers.user_module.RecordingModule`."""

from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812


class RecordingModule(pl.LightningModule):
    """Records every hook the FederatedLoop calls, and uses Lightning's dict return forms."""

    calls: list[str] = []  # noqa: RUF012 - shared on purpose: the test reads it after the run

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, **optim: Any) -> None:
        super().__init__()
        self.layer = nn.Linear(int(torch.tensor(input_shape).prod()), num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.layer(x.flatten(1))

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> dict[str, Tensor]:
        self.calls.append(f"training_step:{batch_idx}")
        x, y = batch
        return {"loss": F.cross_entropy(self(x), y)}

    def on_before_backward(self, loss: Tensor) -> None:
        self.calls.append("on_before_backward")

    def on_after_backward(self) -> None:
        assert self.layer.weight.grad is not None
        self.calls.append("on_after_backward")

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        self.calls.append("on_before_optimizer_step")

    def configure_optimizers(self) -> dict[str, Any]:
        return {"optimizer": torch.optim.SGD(self.parameters(), lr=0.1)}


class EvaluatingModule(RecordingModule):
    """A module with its own evaluation: `test_step` logs top-2 accuracy as test_accuracy
    (not the argmax accuracy fedlight would compute) and a metric of its own, `mean_max_logit`."""

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        top2 = logits.topk(2, dim=1).indices
        self.log("test_accuracy", (top2 == y.unsqueeze(1)).any(dim=1).float().mean())
        self.log_dict({"mean_max_logit": logits.max(dim=1).values.mean()})


class BatchNormModule(pl.LightningModule):
    """A model with BatchNorm, whose running statistics mix examples: not Opacus-compatible."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, **optim: Any) -> None:
        super().__init__()
        features = int(torch.tensor(input_shape).prod())
        self.net = nn.Sequential(nn.Flatten(), nn.BatchNorm1d(features), nn.Linear(features, 10))

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class GroupNormModule(BatchNormModule):
    """BatchNormModule with GroupNorm in its place: no running statistics, Opacus's fix."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, **optim: Any) -> None:
        super().__init__(input_shape, num_classes, **optim)
        self.net[1] = nn.GroupNorm(1, int(torch.tensor(input_shape).prod()))


class CountingModule(BatchNormModule):
    """A linear model that counts its training steps in an integer buffer, its only buffer."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, **optim: Any) -> None:
        super().__init__(input_shape, num_classes, **optim)
        self.net[1] = nn.Identity()
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        self.steps += 1
        return super().training_step(batch, batch_idx)


class UnpicklableHparamsModule(RecordingModule):
    """Saves a hyperparameter that cannot be pickled (a function made in `__init__`)."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, **optim: Any) -> None:
        super().__init__(input_shape, num_classes, **optim)
        self.save_hyperparameters({"activation": lambda x: x})
