"""The sequential engine: one participant after another on the one shared client module.

Each participant loads its start weights into the module and trains with the module's own
`training_step` and `configure_optimizers`, calling its hooks as a Lightning Trainer would
(`on_before_backward`, `on_after_backward`, `on_before_optimizer_step`, each after the
algorithm's callbacks of the same name, the order of Lightning's Trainer). No Trainer is built
per client (README "Speed"), so hooks only ever fire on the client being trained. Any
LightningModule and optimizer work here.
"""

from collections.abc import Iterable, Iterator, Sequence

import torch
from torch import Tensor

from fedlight.engines.base import (
    Engine,
    LocalCallback,
    LocalResult,
    LocalTask,
    batch_indices,
    first_optimizer,
)
from fedlight.errors import ConfigError


def training_loss(output: Tensor | dict[str, Tensor] | None) -> Tensor:
    """`training_step` may return the loss or a dict holding it under "loss", as in Lightning.
    Anything else (None, with which Lightning's Trainer skips the batch) is refused: a client
    trains on every batch it draws, so that its steps and examples are those counted."""
    loss = output.get("loss") if isinstance(output, dict) else output
    if not isinstance(loss, Tensor):
        found = "a dict without 'loss'" if isinstance(output, dict) else repr(output)
        raise ConfigError(
            f"the model's training_step returned {found}, not the loss; fedlight trains on "
            "every batch (Lightning would skip it): return the loss tensor, or a dict with it "
            "under 'loss'"
        )
    return loss


class SequentialEngine(Engine):
    """Trains one client after another on the one client module; see the module docstring."""

    name = "sequential"

    def train(
        self, tasks: Iterable[LocalTask], round_index: int, lrs: Sequence[float]
    ) -> Iterator[LocalResult]:
        """Trains each task only when its result is asked for: the results' weights are the
        module's own tensors, which the next task overwrites."""
        for task in tasks:
            yield self.train_one(task, round_index, lrs)

    def train_one(self, task: LocalTask, round_index: int, lrs: Sequence[float]) -> LocalResult:
        """Local epochs of minibatch training on the task's examples, calling the module's hooks
        as a Trainer would."""
        module, data, local = self.module, self.data, self.settings.local
        callbacks = task.callbacks
        module.load_state_dict(task.start)
        module.train()
        optimizer = first_optimizer(module.configure_optimizers())
        for group, lr in zip(optimizer.param_groups, lrs, strict=True):
            group["lr"] = lr
        seed = self.seed_of(round_index, task.client)
        measuring = [
            c for c in callbacks if type(c).on_train_start is not LocalCallback.on_train_start
        ]
        if measuring:
            torch.manual_seed(seed)
            for callback in measuring:
                callback.on_train_start(module, self.all_batches(task))
        generator = torch.Generator().manual_seed(seed)
        torch.manual_seed(seed)  # for the module's own randomness, e.g. dropout
        augment = data.augment
        losses: list[Tensor] = []
        step = 0
        examples = len(measuring) * len(task.indices)  # a measuring pass is the client's work
        for indices in batch_indices(task.indices, generator, local.epochs, local.batch_size):
            x, y = data.prepare(data.train_x[indices]), data.train_y[indices]
            if task.label_map is not None:
                y = task.label_map[y]
            if augment is not None:
                x = augment(x, generator)
            loss = training_loss(module.training_step((x, y), step))
            optimizer.zero_grad(set_to_none=True)
            for callback in callbacks:
                callback.on_before_backward(module, loss)
            module.on_before_backward(loss)
            loss.backward()
            for callback in callbacks:
                callback.on_after_backward(module)
            module.on_after_backward()
            for callback in callbacks:
                callback.on_before_optimizer_step(module, optimizer)
            module.on_before_optimizer_step(optimizer)
            optimizer.step()
            for callback in callbacks:
                callback.on_train_batch_end(module)
            losses.append(loss.detach())
            step += 1
            examples += len(indices)
        return LocalResult(
            client_id=task.client,
            weights=module.state_dict(),
            num_samples=len(task.indices),
            num_steps=step,
            lr=lrs[0],
            train_loss=torch.stack(losses).mean().item() if losses else 0.0,
            examples=examples,
            measured={key: t for c in callbacks for key, t in c.measured().items()},
        )

    def all_batches(self, task: LocalTask) -> Iterator[tuple[Tensor, Tensor]]:
        """The task's examples in order, in batches of the local batch size, unaugmented."""
        for indices in task.indices.split(self.settings.local.batch_size):
            y = self.data.train_y[indices]
            x = self.data.prepare(self.data.train_x[indices])
            yield x, y if task.label_map is None else task.label_map[y]
