"""The contract between the FederatedLoop and a client engine: how a round's local training runs.

The loop describes each participant's local training as a `LocalTask` and asks an engine for the
results. An engine yields one `LocalResult` per task, in task order, and the loop computes each
client's upload before it asks for the next result, so an engine may reuse storage between results
(the sequential engine's one client module does). Both engines draw the same batches: a client's
example order comes from its own generator (seed, LOCAL_TRAINING, round, client), a fresh
`randperm` per epoch split into batches of `local.batch_size`, so they train the same steps.
"""

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pytorch_lightning as pl
import torch
from torch import Tensor

from fedlight.algorithms.base import LocalCallback, LocalResult
from fedlight.config import ConfigError, RunSettings
from fedlight.data.base import TensorDataset
from fedlight.rng import Stream, derive_seed
from fedlight.tensors import StateDict


@dataclass
class LocalTask:
    """One participant's local training in a round: whose, on which examples, from which weights,
    with which algorithm hooks."""

    client: int
    indices: Tensor  # training examples, on the data's device
    start: StateDict  # the weights local training starts from (read, never modified)
    callbacks: list[LocalCallback]
    # The label it trains on for each true label (a label-flipping client); None: the true ones.
    # Applied per batch, so the shared dataset is never copied.
    label_map: Tensor | None = None


def first_optimizer(configured: Any) -> torch.optim.Optimizer:
    """The optimizer out of any return value Lightning allows for `configure_optimizers`."""
    if isinstance(configured, torch.optim.Optimizer):
        return configured
    if isinstance(configured, dict) and "optimizer" in configured:
        return first_optimizer(configured["optimizer"])
    if isinstance(configured, list | tuple) and configured:
        return first_optimizer(configured[0])
    raise ConfigError(
        f"model: configure_optimizers() returned {type(configured).__name__}; "
        "return a torch.optim.Optimizer (or Lightning's list/dict forms)"
    )


def num_local_steps(num_examples: int, epochs: int, batch_size: int) -> int:
    """Steps of `epochs` passes over `num_examples` in batches of `batch_size` (the last one
    partial); a client without data takes none."""
    return epochs * -(-num_examples // batch_size)


def batch_indices(
    indices: Tensor, generator: torch.Generator, epochs: int, batch_size: int
) -> Iterator[Tensor]:
    """The example indices of each local step: per epoch a fresh permutation of `indices` drawn
    from `generator`, split into batches. Lazy, so that whatever else the caller draws from
    `generator` (batch augmentation) happens between the permutations, in the same order for
    every engine."""
    for _ in range(epochs if len(indices) else 0):
        order = indices[torch.randperm(len(indices), generator=generator).to(indices.device)]
        yield from order.split(batch_size)


class Engine(ABC):
    """Runs the local training of a round's participants on one client module's architecture."""

    name: ClassVar[str]  # as summary.json records the engine a run trained with

    def __init__(
        self,
        module: pl.LightningModule,
        data: TensorDataset,
        settings: RunSettings,
        stream: Stream = Stream.LOCAL_TRAINING,
    ) -> None:
        """`stream`: the purpose whose generators draw the batches (evaluation-time fine-tuning
        has its own)."""
        self.module = module
        self.data = data
        self.settings = settings
        self.stream = stream

    def seed_of(self, round_index: int, client: int) -> int:
        """The seed of one client's local training in one round."""
        return derive_seed(self.settings.seed, self.stream, round_index, client)

    @abstractmethod
    def train(
        self, tasks: Iterable[LocalTask], round_index: int, lrs: Sequence[float]
    ) -> Iterator[LocalResult]:
        """One result per task, in task order, with the optimizer's parameter groups at learning
        rates `lrs`. A result's weights are valid until the next result is requested. `tasks`
        may be lazy: an engine that trains one client at a time takes the next task only after
        the previous result was used, so a round never holds every client's task at once."""

    def close(self) -> None:
        """Undo what the engine did to the client module (hooks), before another engine trains
        it."""
        return None
