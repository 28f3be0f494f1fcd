"""The sequential engine: one participant after another on the one shared client module.

Each participant loads its start weights into the module and trains with the module's own
`training_step` and `configure_optimizers` (its lr schedulers included), calling its hooks as a
Lightning Trainer would (the table in `fedlight.engines.lightning`; each algorithm callback before
the module's hook of the same name, the order of Lightning's Trainer), with `self.log` collected
into the result. No Trainer is built per client (docs/speed-and-memory.md), so hooks only ever fire
on the client being trained. Any LightningModule and optimizer work here.
"""

from collections.abc import Iterable, Iterator, Sequence

import pytorch_lightning as pl
import torch
from torch import Tensor

from fedlight.core.errors import ConfigError
from fedlight.core.layout import contiguous_state
from fedlight.core.messages import LocalResult
from fedlight.core.rng import Stream, seed_torch
from fedlight.core.settings import RunSettings
from fedlight.data.base import TensorDataset
from fedlight.engines.base import (
    Engine,
    LocalCallback,
    LocalTask,
    num_local_steps,
    stored_batches,
)
from fedlight.engines.lightning import check_trainable
from fedlight.engines.module_logs import Logs, TrainingLogs, local_metrics, logging_to
from fedlight.engines.module_optim import (
    Optimization,
    clipping_by,
    clips_gradients,
    configured_optimization,
)
from fedlight.engines.trainer_standin import TrainerStandIn, standin_of

SKIPPED_BATCH = (
    "the model's on_train_batch_start returned -1, with which Lightning skips the rest of the "
    "epoch; fedlight trains on every batch it counts: return None"
)


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

    def __init__(
        self,
        module: pl.LightningModule,
        data: TensorDataset,
        settings: RunSettings,
        stream: Stream = Stream.LOCAL_TRAINING,
    ) -> None:
        super().__init__(module, data, settings, stream)
        check_trainable(module)
        self.clips = clips_gradients(module, settings.local)

    def train(
        self, tasks: Iterable[LocalTask], round_index: int, lrs: Sequence[float]
    ) -> Iterator[LocalResult]:
        """Trains each task only when its result is asked for: the results' weights are the
        module's own tensors, which the next task overwrites."""
        for task in tasks:
            yield self.train_one(task, round_index, lrs)

    def train_one(self, task: LocalTask, round_index: int, lrs: Sequence[float]) -> LocalResult:
        """Local epochs of minibatch training on the task's examples, calling the module's hooks
        as a Trainer would, with its logging, metrics and gradient clipping in fedlight's hands."""
        module, local = self.module, self.settings.local
        module.load_state_dict(task.start)
        module.train()
        epochs = task.epochs_of(local.epochs)
        standin = standin_of(module, local.epochs, local.batch_size)
        with standin.local_training(len(task.indices), epochs):
            optimization = configured_optimization(module)
            standin.optimizers = [optimization.optimizer]
            standin.lr_scheduler_configs = list(optimization.schedulers)
            for group, lr in zip(optimization.optimizer.param_groups, lrs, strict=True):
                group["lr"] = lr
            # what a measuring pass logs (in training_step) is not training's
            with logging_to(module, Logs(stepping=True)):
                measured, seed = self.measure(task, round_index)
            logs = TrainingLogs()
            with local_metrics(module), logging_to(module, logs):
                with clipping_by(module, local):
                    losses, examples = self.fit(task, epochs, optimization, seed, logs, standin)
                logged = logs.sums()
        return LocalResult(
            client_id=task.client,
            weights=contiguous_state(module.state_dict()),
            num_samples=len(task.indices),
            num_steps=len(losses),
            lr=lrs[0],
            train_loss=torch.stack(losses).mean().item() if losses else 0.0,
            examples=examples + measured * len(task.indices),  # a measuring pass is work too
            measured=contiguous_state(
                {key: t for c in task.callbacks for key, t in c.measured().items()}
            ),
            logged=logged,
        )

    def measure(self, task: LocalTask, round_index: int) -> tuple[int, int]:
        """The callbacks that measure something at the start weights do (SCAFFOLD's option I
        gradient); how many did, and the seed of the client's training."""
        seed = self.seed_of(round_index, task.client)
        measuring = [
            c for c in task.callbacks if type(c).on_train_start is not LocalCallback.on_train_start
        ]
        if measuring:
            seed_torch(seed)
            for callback in measuring:
                callback.on_train_start(self.module, self.all_batches(task))
        return len(measuring), seed

    def fit(
        self,
        task: LocalTask,
        epochs: int,
        optimization: Optimization,
        seed: int,
        logs: TrainingLogs,
        standin: TrainerStandIn,
    ) -> tuple[list[Tensor], int]:
        """The client's `epochs` local epochs: its step losses and the examples it trained on; the
        stand-in's `current_epoch` and `global_step`, and `batch_idx` (from 0 in each epoch),
        count them as a Trainer's would."""
        module, data, local, callbacks = self.module, self.data, self.settings.local, task.callbacks
        optimizer = optimization.optimizer
        generator = torch.Generator().manual_seed(seed)
        seed_torch(seed)  # for the module's own randomness, e.g. dropout
        augment = data.augment
        per_epoch = num_local_steps(len(task.indices), 1, local.batch_size)
        losses: list[Tensor] = []
        module.on_train_start()
        logs.collect(len(task.indices))
        for step, (stored, y) in enumerate(
            stored_batches(data, task.indices, generator, epochs, local.batch_size)
        ):
            epoch, batch_idx = divmod(step, per_epoch)
            standin.current_epoch = epoch
            if batch_idx == 0:
                module.on_train_epoch_start()
                logs.collect(len(task.indices))
            x = data.prepare(stored)
            if task.label_map is not None:
                y = task.label_map[y]
            if augment is not None:
                x = augment(x, generator)
            logs.stepping = True
            if module.on_train_batch_start((x, y), batch_idx) == -1:
                raise ConfigError(SKIPPED_BATCH)
            output = module.training_step((x, y), batch_idx)
            loss = training_loss(output)
            self.step(loss, optimizer, callbacks)
            standin.global_step += 1
            last_of_epoch = batch_idx == per_epoch - 1
            optimization.after_step(module, batch_idx, epoch, last_of_epoch)
            for callback in callbacks:
                callback.on_train_batch_end(module)
            module.on_train_batch_end(output, (x, y), batch_idx)
            logs.stepping = False
            losses.append(loss.detach())
            logs.examples += len(y)
            logs.collect(len(y))
            if last_of_epoch:
                module.on_train_epoch_end()
                logs.collect(len(task.indices))
                logs.end_epoch(len(task.indices))
        standin.current_epoch = epochs  # a Trainer's count of the epochs done
        module.on_train_end()
        logs.collect(len(task.indices))
        return losses, logs.examples

    def step(
        self, loss: Tensor, optimizer: torch.optim.Optimizer, callbacks: Sequence[LocalCallback]
    ) -> None:
        """One optimizer step from `loss`, with the hooks around it in a Trainer's order:
        callbacks first, then the module; gradient clipping right before the step."""
        module, local = self.module, self.settings.local
        module.on_before_zero_grad(optimizer)
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
        if self.clips:
            module.configure_gradient_clipping(
                optimizer,
                gradient_clip_val=local.gradient_clip_val,
                gradient_clip_algorithm=local.gradient_clip_algorithm,
            )
        optimizer.step()

    def all_batches(self, task: LocalTask) -> Iterator[tuple[Tensor, Tensor]]:
        """The task's examples in order, in batches of the local batch size, unaugmented."""
        for indices in task.indices.split(self.settings.local.batch_size or len(task.indices)):
            y = self.data.train_y[indices]
            x = self.data.prepare(self.data.train_x[indices])
            yield x, y if task.label_map is None else task.label_map[y]
