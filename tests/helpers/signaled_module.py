"""A model whose training sends a signal to its own worker process, as a user's `kill` would:
`model._target_=tests.helpers.signaled_module.SignaledMLP +model.signal=KILL` (worker 1 of
`fl.workers` stops or dies at its first training step)."""

import os
import signal
from typing import Any

import torch.distributed as dist
from torch import Tensor

from fedlight.models.mlp import MLP


class SignaledMLP(MLP):
    def __init__(
        self, input_shape: tuple[int, ...], num_classes: int, signal: str, **optim: Any
    ) -> None:
        super().__init__(input_shape, num_classes, **optim)
        self.signal = signal

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        if dist.is_initialized() and dist.get_rank() == 1:
            os.kill(os.getpid(), signal.Signals[f"SIG{self.signal}"])
        return super().training_step(batch, batch_idx)
