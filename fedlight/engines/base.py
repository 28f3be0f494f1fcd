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
from typing import Any, ClassVar, TypeVar

import pytorch_lightning as pl
import torch
from torch import Tensor

from fedlight.core.messages import LocalResult
from fedlight.core.rng import Stream, derive_seed
from fedlight.core.settings import RunSettings
from fedlight.core.tensors import StateDict
from fedlight.data.base import TensorDataset
from fedlight.engines.module_optim import optimization_of


class LocalCallback:
    """Lightning-style hooks an algorithm adds to a client's local training.

    The sequential engine calls them right before the client module's hook of the same name (the
    order of a Lightning Trainer: callbacks, then the module), on the client being trained only.
    A callback whose whole effect is a gradient correction implements `correct_gradients` (and
    `stack`) only: the default `on_after_backward` applies it to the module's gradients, and the
    vectorized engine, which has no module per client, calls it on the `stack`ed callbacks of
    all clients. The math is written once.
    """

    def on_train_start(
        self, module: pl.LightningModule, batches: Iterable[tuple[Tensor, Tensor]]
    ) -> None:
        """Called before the first local step, at the start weights, with the client's examples
        in batches (in order, without augmentation), for a callback that measures something
        there (SCAFFOLD's option I gradient). The sequential engine only.

        Args:
            module: the client module, at the start weights.
            batches: the client's examples as (inputs, labels) batches.
        """

    def measured(self) -> StateDict:
        """Tensors measured during local training, handed to the algorithm's upload in
        `LocalResult.measured`.

        Returns:
            Name → tensor; none by default.
        """
        return {}

    def on_before_backward(self, module: pl.LightningModule, loss: Tensor) -> None:
        """Called with the loss of a local step before backpropagation.

        Args:
            module: the client module.
            loss: the step's loss.
        """

    fills_missing_gradients: ClassVar[bool] = False  # correct parameters without a gradient too

    def on_after_backward(self, module: pl.LightningModule) -> None:
        """Called once gradients exist and before the optimizer sees them: `correct_gradients`
        applied to the trainable parameters that have a gradient (and, with
        `fills_missing_gradients`, to the others as a zero gradient); nothing for a callback
        without `correct_gradients`.

        Args:
            module: the client module, its gradients computed.
        """
        if type(self).correct_gradients is LocalCallback.correct_gradients:
            return
        params = {
            name: param
            for name, param in module.named_parameters()
            if param.requires_grad and (param.grad is not None or self.fills_missing_gradients)
        }
        with torch.no_grad():
            values = {name: param.detach() for name, param in params.items()}
            grads = {
                name: torch.zeros_like(param) if param.grad is None else param.grad
                for name, param in params.items()
            }
            for name, corrected in self.correct_gradients(values, grads).items():
                param = params[name]
                if param.grad is None:
                    param.grad = corrected
                elif corrected is not param.grad:
                    param.grad.copy_(corrected)

    def on_before_optimizer_step(
        self, module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        """Called right before each optimizer step.

        Args:
            module: the client module.
            optimizer: its optimizer.
        """

    def on_train_batch_end(self, module: pl.LightningModule) -> None:
        """Called after each local step's optimizer step (sequential engine only: a callback
        that acts here has no `correct_gradients`, so the vectorized engine refuses it).

        Args:
            module: the client module, after the step.
        """

    def correct_gradients(self, params: StateDict, grads: StateDict) -> StateDict:
        """The corrected gradients `grads` of the trainable parameters `params`, name → tensor
        (a new dict; tensors may be new or updated in place). Called on a `stack`ed callback,
        every tensor has a leading client dimension. Override it (and `stack`) only if it is the
        callback's whole effect; a callback without it trains on the sequential engine only.

        Args:
            params: the trainable parameters' values, name → tensor.
            grads: their gradients, name → tensor.

        Returns:
            The corrected gradients, name → tensor.
        """
        raise NotImplementedError

    @classmethod
    def stack(cls: type["CallbackT"], callbacks: Sequence["CallbackT"]) -> "CallbackT":
        """One callback acting as `callbacks` (one per client, of this class) on tensors stacked
        along a new leading client dimension, in their order: the vectorized engine corrects all
        clients' gradients in one call.

        Args:
            callbacks: one callback of this class per client, in order.

        Returns:
            The callback acting on the stacked tensors.
        """
        raise NotImplementedError


CallbackT = TypeVar("CallbackT", bound=LocalCallback)


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
    epochs: int | None = None  # its local epochs this round (`local_work`); None: local.epochs

    def epochs_of(self, configured: int) -> int:
        """The epochs it trains, `configured` (local.epochs) where the task names none."""
        return configured if self.epochs is None else self.epochs


def first_optimizer(configured: Any) -> torch.optim.Optimizer:
    """The optimizer out of any return value Lightning allows for `configure_optimizers`."""
    return optimization_of(configured).optimizer


def num_local_steps(num_examples: int, epochs: int, batch_size: int | None) -> int:
    """Steps of `epochs` passes over `num_examples` in batches of `batch_size` (the last one
    partial; None: all of them, B = ∞); a client without data takes none."""
    return epochs * -(-num_examples // (batch_size or max(num_examples, 1)))


def epoch_orders(indices: Tensor, generator: torch.Generator, epochs: int) -> Iterator[Tensor]:
    """Each local epoch's order of `indices`: a fresh permutation drawn from `generator`. Lazy,
    so that whatever else the caller draws from `generator` (batch augmentation) happens between
    the permutations, in the same order for every engine."""
    for _ in range(epochs if len(indices) else 0):
        yield indices[torch.randperm(len(indices), generator=generator).to(indices.device)]


def batch_indices(
    indices: Tensor, generator: torch.Generator, epochs: int, batch_size: int | None
) -> Iterator[Tensor]:
    """The example indices of each local step: each epoch's order split into batches."""
    for order in epoch_orders(indices, generator, epochs):
        yield from order.split(batch_size or len(indices))


GATHER_BYTES = 4 * 2**20  # stored examples `stored_batches` gathers at once, at most about


def stored_batches(
    data: TensorDataset,
    indices: Tensor,
    generator: torch.Generator,
    epochs: int,
    batch_size: int | None,
) -> Iterator[tuple[Tensor, Tensor]]:
    """The stored examples and labels of `batch_indices`' batches, in its order and drawing the
    same permutations: gathered from the dataset several batches at once (up to about
    `GATHER_BYTES` of examples) and split into views, one indexing of the held tensors instead
    of one per batch: at B = 10 the per-batch gathers were a twentieth of a small model's step."""
    example_bytes = max(1, data.train_x[:1].numel() * data.train_x.element_size())
    for order in epoch_orders(indices, generator, epochs):
        size = batch_size or len(order)
        chunk = max(1, GATHER_BYTES // (size * example_bytes)) * size
        for part in order.split(chunk):
            x, y = data.train_x[part], data.train_y[part]
            yield from zip(x.split(size), y.split(size), strict=True)


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
        """An engine for one client module's architecture and the run's data.

        Args:
            module: the client LightningModule (the architecture every client trains).
            data: the run's data, on its device.
            settings: the run's settings (local epochs, batch size, seed).
            stream: the purpose whose generators draw the batches (evaluation-time fine-tuning
                has its own).
        """
        self.module = module
        self.data = data
        self.settings = settings
        self.stream = stream

    def seed_of(self, round_index: int, client: int) -> int:
        """The seed of one client's local training in one round.

        Args:
            round_index: the round.
            client: the client.

        Returns:
            The seed derived from (seed, the engine's stream, round, client).
        """
        return derive_seed(self.settings.seed, self.stream, round_index, client)

    @abstractmethod
    def train(
        self, tasks: Iterable[LocalTask], round_index: int, lrs: Sequence[float]
    ) -> Iterator[LocalResult]:
        """One result per task, in task order, with the optimizer's parameter groups at learning
        rates `lrs`. A result's weights are valid until the next result is requested. `tasks`
        may be lazy: an engine that trains one client at a time takes the next task only after
        the previous result was used, so a round never holds every client's task at once.

        Args:
            tasks: the participants' local trainings, in order (possibly lazy).
            round_index: the round.
            lrs: the learning rate of each of the optimizer's parameter groups.

        Returns:
            One result per task, in task order, each valid until the next is requested.
        """

    def close(self) -> None:
        """Undo what the engine did to the client module (hooks), before another engine trains
        it; nothing by default."""
        return None
