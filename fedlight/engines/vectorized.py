"""The vectorized engine: all participants of a round train at once with `torch.func`.

Their start weights are stacked along a leading client dimension, and one local step of every
client is `vmap(grad_and_value(loss))` over `functional_call` of the shared network (the model
ensembling recipe, https://pytorch.org/tutorials/intermediate/ensembling.html), followed by
`torch.optim.SGD`'s update written out functionally, operation for operation, on the stacked
tensors. The per-client Python loop becomes one batched computation, which should pay off where
kernel launches dominate (small models on a GPU); its measured speed is in docs/speed-and-memory.md,
"Client engines".

Same training as the sequential engine:
- Batches: each client's examples come from the same generator (seed, LOCAL_TRAINING, round,
  client) through the same `batch_indices`, and augmentation draws from it in the same order.
- Unequal clients: a step stacks every client's batch padded to the longest with a mask; a padded
  example's loss is multiplied by 0, so it adds nothing to its client's mean loss or gradient. A
  client whose batches are used up (or that has no data) keeps its weights and momentum through
  `torch.where`, so it ends exactly where its own last step left it.
- Algorithms: callbacks correct gradients through `LocalCallback.correct_gradients` of their
  `stack` over the clients, the functional form of the `on_after_backward` the sequential engine
  calls.
The results agree with the sequential engine to float rounding (batched kernels sum in another
order), not bit for bit.

- Gradient clipping (`local.gradient_clip_val`, `local.gradient_clip_algorithm`): each client's
  gradients clipped as `torch.nn.utils.clip_grad_norm_`/`clip_grad_value_` would, after the
  algorithm's corrections, as the sequential engine's `configure_gradient_clipping`.

What it cannot reproduce it refuses, with a one-line ConfigError, before training: a model that is
not the built-in `Classifier` with its cross-entropy `training_step` (which logs nothing) and none
of the training hooks the sequential engine calls overridden (`fedlight.engines.lightning`), a model
with
buffers (running statistics) or dropout, an optimizer other than `torch.optim.SGD` (momentum and
weight decay are supported; dampening, Nesterov and maximize are not) or one with an lr scheduler,
and algorithm callbacks without `correct_gradients`.
"""

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import pytorch_lightning as pl
import torch
from torch import Tensor
from torch.func import functional_call, grad_and_value, vmap
from torch.nn import functional as F  # noqa: N812
from torch.nn.modules.dropout import _DropoutNd
from torch.nn.utils.rnn import pad_sequence

from fedlight.core.errors import ConfigError
from fedlight.core.messages import LocalResult
from fedlight.core.rng import Stream
from fedlight.core.settings import RunSettings
from fedlight.core.tensors import StateDict
from fedlight.data.base import TensorDataset
from fedlight.engines.base import Engine, LocalCallback, LocalTask, batch_indices, num_local_steps
from fedlight.engines.module_optim import configured_optimization
from fedlight.models.classifier import Classifier

USE_SEQUENTIAL = "use fl.engine=sequential"
NET = "net."  # state-dict prefix of `Classifier.net`, the network its training_step runs
# The hooks the sequential engine calls in local training (fedlight.engines.lightning): this engine
# computes `Classifier.training_step` itself and calls none of them, so a model must keep
# Classifier's.
CLASSIFIER_METHODS = (
    "training_step",
    "on_train_start",
    "on_train_end",
    "on_train_epoch_start",
    "on_train_epoch_end",
    "on_train_batch_start",
    "on_train_batch_end",
    "on_before_zero_grad",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "configure_gradient_clipping",
    "lr_scheduler_step",
)


@dataclass(frozen=True)
class SGDSettings:
    """The SGD settings of one parameter and the index of its group, whose learning rate the
    round sets."""

    group: int
    momentum: float
    weight_decay: float


def check_classifier(module: pl.LightningModule) -> None:
    """The engine computes `Classifier.training_step` itself: the module must be one, unchanged,
    without buffers (running statistics) or dropout (whose draws it cannot reproduce)."""
    name = type(module).__name__
    if not isinstance(module, Classifier):
        raise ConfigError(
            f"fl.engine=vectorized trains the built-in models' cross-entropy step only and {name} "
            f"is not a fedlight Classifier; {USE_SEQUENTIAL}"
        )
    for method in CLASSIFIER_METHODS:
        if getattr(type(module), method) is not getattr(Classifier, method):
            raise ConfigError(
                f"fl.engine=vectorized trains the built-in models' cross-entropy step only and "
                f"{name} overrides {method}; {USE_SEQUENTIAL}"
            )
    buffer = next((key for key, _ in module.named_buffers()), None)
    if buffer is not None:
        raise ConfigError(
            f"fl.engine=vectorized needs a model without buffers (running statistics) and {name} "
            f"has {buffer}; {USE_SEQUENTIAL}"
        )
    if any(isinstance(layer, _DropoutNd) for layer in module.modules()):
        raise ConfigError(
            f"fl.engine=vectorized cannot reproduce dropout's per-client draws and {name} has "
            f"dropout; {USE_SEQUENTIAL}"
        )


def sgd_settings(module: pl.LightningModule) -> dict[str, SGDSettings]:
    """The SGD settings of each parameter of `module.net` the optimizer updates, in module order;
    refuses any other optimizer."""
    optimization = configured_optimization(module)
    if optimization.schedulers:
        raise ConfigError(
            "fl.engine=vectorized keeps each round's learning rate through local training and "
            f"the model's configure_optimizers() returns a "
            f"{type(optimization.schedulers[0].scheduler).__name__}; {USE_SEQUENTIAL}"
        )
    optimizer = optimization.optimizer
    if type(optimizer) is not torch.optim.SGD:
        raise ConfigError(
            f"fl.engine=vectorized implements torch.optim.SGD only and the model's "
            f"configure_optimizers() returned {type(optimizer).__name__}; {USE_SEQUENTIAL}"
        )
    group_of: dict[int, tuple[int, dict]] = {}
    for index, group in enumerate(optimizer.param_groups):
        if group["dampening"] or group["nesterov"] or group["maximize"]:
            raise ConfigError(
                "fl.engine=vectorized implements SGD without dampening, nesterov or maximize; "
                + USE_SEQUENTIAL
            )
        group_of |= {id(param): (index, group) for param in group["params"]}
    settings: dict[str, SGDSettings] = {}
    for name, param in module.named_parameters():
        if name.startswith(NET) and param.requires_grad and id(param) in group_of:
            index, group = group_of[id(param)]
            settings[name] = SGDSettings(index, group["momentum"], group["weight_decay"])
    return settings


def stacked_label_maps(
    tasks: Sequence[LocalTask], num_classes: int, device: torch.device
) -> Tensor | None:
    """The clients' label maps as rows of a [clients, classes] tensor (the identity for clients
    on their true labels); None when every client trains on its true labels."""
    if all(task.label_map is None for task in tasks):
        return None
    identity = torch.arange(num_classes, device=device)
    return torch.stack([identity if t.label_map is None else t.label_map for t in tasks])


def stacked_callbacks(tasks: Sequence[LocalTask]) -> list[LocalCallback]:
    """Each of the round's algorithm callbacks stacked over the clients, in task order."""
    kinds = {tuple(type(callback) for callback in task.callbacks) for task in tasks}
    if len(kinds) != 1:
        raise ConfigError(
            "fl.engine=vectorized needs the same kinds of algorithm callbacks on every client of "
            f"a round; {USE_SEQUENTIAL}"
        )
    (kind_per_position,) = kinds
    for kind in kind_per_position:
        if (
            kind.correct_gradients is LocalCallback.correct_gradients
            or kind.stack.__func__ is LocalCallback.stack.__func__
        ):
            raise ConfigError(
                f"fl.engine=vectorized needs algorithm callbacks with correct_gradients and stack "
                f"and {kind.__name__} has none; {USE_SEQUENTIAL}"
            )
    return [
        kind.stack([task.callbacks[position] for task in tasks])
        for position, kind in enumerate(kind_per_position)
    ]


def clip_norms(grads: StateDict, max_norm: float) -> StateDict:
    """`torch.nn.utils.clip_grad_norm_` of each client's gradients (stacked along the first
    dimension): scaled by min(1, max_norm / (their total L2 norm + 1e-6))."""
    norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads.values()]).norm(dim=0)
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    return {name: g * scale.view(-1, *[1] * (g.dim() - 1)) for name, g in grads.items()}


def clip_values(grads: StateDict, clip_val: float) -> StateDict:
    """`torch.nn.utils.clip_grad_value_`: every gradient entry into [-clip_val, clip_val]."""
    return {name: g.clamp(-clip_val, clip_val) for name, g in grads.items()}


# `local.gradient_clip_algorithm` on stacked gradients (fedlight.engines.module_optim.clip,
# functionally).
CLIPPERS: dict[str, Callable[[StateDict, float], StateDict]] = {
    "norm": clip_norms,
    "value": clip_values,
}


def keep_where_idle(moving: Tensor | None, updated: Tensor, current: Tensor) -> Tensor:
    """`updated` for the clients that took this step, `current` for the others (None: all)."""
    if moving is None:
        return updated
    return torch.where(moving.view(-1, *[1] * (current.dim() - 1)), updated, current)


class VectorizedEngine(Engine):
    """Trains the round's clients in lockstep on stacked weights; see the module docstring."""

    name = "vectorized"

    def __init__(
        self,
        module: pl.LightningModule,
        data: TensorDataset,
        settings: RunSettings,
        stream: Stream = Stream.LOCAL_TRAINING,
    ) -> None:
        super().__init__(module, data, settings, stream)
        check_classifier(module)
        self.sgd = sgd_settings(module)
        self.client_step = vmap(grad_and_value(self.client_loss))
        self.clip_val = settings.local.gradient_clip_val
        self.clip_algorithm = settings.local.gradient_clip_algorithm or "norm"

    def client_loss(
        self, params: StateDict, constants: StateDict, x: Tensor, y: Tensor, mask: Tensor
    ) -> Tensor:
        """`Classifier.training_step` of one client: the mean cross-entropy over the real
        examples of its padded batch (0 for a client without a batch)."""
        weights = {name.removeprefix(NET): t for name, t in (params | constants).items()}
        logits = functional_call(self.module.net, weights, (x,))
        losses = F.cross_entropy(logits, y, reduction="none")
        return (losses * mask).sum() / mask.sum().clamp(min=1)

    def train(
        self, tasks: Iterable[LocalTask], round_index: int, lrs: Sequence[float]
    ) -> Iterator[LocalResult]:
        """Trains every task when the first result is asked for, then yields the results."""
        tasks = list(tasks)
        if tasks:
            yield from self.train_together(tasks, round_index, lrs)

    def train_together(
        self, tasks: Sequence[LocalTask], round_index: int, lrs: Sequence[float]
    ) -> list[LocalResult]:
        """Step s of every client at once, for as many steps as the busiest client takes."""
        local, device = self.settings.local, self.data.train_x.device
        callbacks = stacked_callbacks(tasks)
        self.module.train()  # as the sequential engine (the supported models act the same in eval)
        weights = {
            name: torch.stack([task.start[name] for task in tasks]) for name in tasks[0].start
        }
        params = {name: weights[name] for name in self.sgd}
        constants = {
            name: t for name, t in weights.items() if name.startswith(NET) and name not in params
        }
        momentum: StateDict = {}
        generators = [
            torch.Generator().manual_seed(self.seed_of(round_index, task.client)) for task in tasks
        ]
        label_maps = stacked_label_maps(tasks, self.data.num_classes, device)
        epochs = [task.epochs_of(local.epochs) for task in tasks]
        streams = [
            batch_indices(task.indices, generator, task_epochs, local.batch_size)
            for task, generator, task_epochs in zip(tasks, generators, epochs, strict=True)
        ]
        steps = [
            num_local_steps(len(t.indices), e, local.batch_size)
            for t, e in zip(tasks, epochs, strict=True)
        ]
        loss_sums = torch.zeros(len(tasks), device=device)
        for step in range(max(steps)):
            taking = [step < client_steps for client_steps in steps]
            x, y, mask = self.step_batches(streams, generators, taking)
            if label_maps is not None:
                y = label_maps.gather(1, y)
            grads, losses = self.client_step(params, constants, x, y, mask)
            for callback in callbacks:
                grads = callback.correct_gradients(params, grads)
            if self.clip_val:
                grads = CLIPPERS[self.clip_algorithm](grads, self.clip_val)
            moving = None if all(taking) else torch.tensor(taking, device=device)
            params, momentum = self.sgd_step(params, grads, momentum, lrs, moving)
            loss_sums += losses  # 0 for a client without a batch
        weights |= params
        mean_losses = (loss_sums / torch.tensor(steps, device=device).clamp(min=1)).tolist()
        return [
            LocalResult(
                client_id=task.client,
                weights={name: t[client] for name, t in weights.items()},
                num_samples=len(task.indices),
                num_steps=steps[client],
                lr=lrs[0],
                train_loss=mean_losses[client],
                examples=epochs[client] * len(task.indices),
            )
            for client, task in enumerate(tasks)
        ]

    def step_batches(
        self,
        streams: Sequence[Iterator[Tensor]],
        generators: Sequence[torch.Generator],
        taking: Sequence[bool],
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Inputs, labels and the real-example mask of one step of every client, padded to the
        longest batch; a client that takes no step gets padding only."""
        data = self.data
        no_batch = torch.zeros(0, dtype=torch.int64, device=data.train_x.device)
        rows = [
            next(stream) if takes else no_batch
            for stream, takes in zip(streams, taking, strict=True)
        ]
        indices = pad_sequence(rows, batch_first=True)  # pads with example 0, masked out below
        x, y = data.prepare(data.train_x[indices]), data.train_y[indices]
        if data.augment is not None:
            for client, (row, generator) in enumerate(zip(rows, generators, strict=True)):
                if len(row):  # draws from the client's generator exactly as the sequential engine
                    x[client, : len(row)] = data.augment(x[client, : len(row)], generator)
        lengths = torch.tensor([len(row) for row in rows], device=indices.device)
        positions = torch.arange(indices.shape[1], device=indices.device)
        mask = (positions < lengths.unsqueeze(1)).to(x.dtype)
        return x, y, mask

    def sgd_step(
        self,
        params: StateDict,
        grads: StateDict,
        momentum: StateDict,
        lrs: Sequence[float],
        moving: Tensor | None,
    ) -> tuple[StateDict, StateDict]:
        """`torch.optim.SGD.step` (its single-tensor path) on every client at once: weight decay,
        then momentum (the first step's buffer is the gradient itself), then the step; clients
        not `moving` keep their weights and momentum."""
        new_params: StateDict = {}
        new_momentum: StateDict = {}
        for name, param in params.items():
            sgd = self.sgd[name]
            step = grads[name]
            if sgd.weight_decay != 0:
                step = step.add(param, alpha=sgd.weight_decay)
            if sgd.momentum != 0:
                if name in momentum:
                    step = keep_where_idle(
                        moving, momentum[name].mul(sgd.momentum).add(step), momentum[name]
                    )
                new_momentum[name] = step
            new_params[name] = keep_where_idle(
                moving, param.add(step, alpha=-lrs[sgd.group]), param
            )
        return new_params, new_momentum
