"""What fedlight does in place of a Lightning Trainer when it trains and evaluates a client module.

No Trainer is built (one per client cost about 40% of the speed, docs/speed-and-memory.md): the
engines and the evaluator call the module's hooks themselves, in a Trainer's order. A client's local
training in a round is one `fit` of `local.epochs` epochs without validation; an evaluation is one
`test` (or `validate`, of the validation set).

Called, in this order (docs/data-and-models.md "Your own model" has the same as a table):
- once per module, when it is built: `setup("fit")`, `configure_model()`;
- each local training (one client in one round): `configure_optimizers()`, `on_train_start()`,
  then per local epoch `on_train_epoch_start()`, its steps, `on_train_epoch_end()`, and at the end
  `on_train_end()`;
- each local step: `on_train_batch_start(batch, batch_idx)` (-1 is refused: fedlight trains every
  batch it counts), `training_step(batch, batch_idx)`, `on_before_zero_grad(optimizer)`, the
  optimizer's `zero_grad`, `on_before_backward(loss)`, backward, `on_after_backward()`,
  `on_before_optimizer_step(optimizer)`, `configure_gradient_clipping(optimizer,
  local.gradient_clip_val, local.gradient_clip_algorithm)` (where the module overrides it or the
  setting is on), the optimizer's `step()`, `lr_scheduler_step(scheduler, None)` for each
  `interval: step` scheduler every `frequency` batches of the epoch and, after the epoch's last
  batch, for each `interval: epoch` one every `frequency` epochs, then
  `on_train_batch_end(output, batch, batch_idx)`;
- each evaluation of the test set with the module's own `test_step`: `on_test_epoch_start()`,
  `test_step(batch, batch_idx)` per batch, `on_test_epoch_end()`; of the validation set with its
  `validation_step`, the `on_validation_*` ones.

An algorithm's callbacks (`LocalCallback`) run before the module's hook of the same name.
`batch_idx` in training counts the client's local steps from 0 across its epochs (a Trainer's
restarts each epoch). Not called, as there is no Trainer: `on_fit_start`/`end` and `teardown` (a
run is not one fit), `configure_callbacks` (callbacks need a Trainer), `on_save_checkpoint`/
`on_load_checkpoint` (fedlight checkpoints the state dicts itself), the data hooks
(`prepare_data`, `*_dataloader`, `transfer_batch_to_device`, `on_*_batch_transfer`: the `data`
group's tensors are already on the device), validation during training and `predict_step`.
Refused in one line, since they change the arithmetic of a step and fedlight would ignore them:
manual optimization (`automatic_optimization = False`) and overrides of `backward`,
`optimizer_step` and `optimizer_zero_grad`; a `ReduceLROnPlateau` (it needs a monitored value
per epoch, which a client's local training does not produce).

`self.log`/`self.log_dict` work in every hook above: `Logs` stands in for the Trainer's logging
(`on_step`/`on_epoch` included) and, as it does, refuses a value that is not a number, a tensor of
one element or a Metric. `self.trainer` is a stand-in with the fields modules commonly read
(`fedlight.engines.trainer_standin`). A module is built as Lightning's CLI builds it
(`ModelFactory`), and may come from either Lightning package (`lightning.pytorch` or
`pytorch_lightning`, `overrides`).
"""

import inspect
import numbers
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import hydra
import pytorch_lightning as pl
import torch
from hydra.errors import InstantiationException
from torch import Tensor
from torchmetrics import Metric

from fedlight.core.dotted import locate
from fedlight.core.errors import ConfigError, one_line, require
from fedlight.core.settings import LocalSettings

# Hooks a Trainer calls that change a step's arithmetic and that fedlight does not call.
REFUSED_OVERRIDES = ("backward", "optimizer_step", "optimizer_zero_grad")
# Lightning's two packages: `lightning.pytorch` (`import lightning`) ships its own copy of
# `pytorch_lightning`'s classes, so a module derives from one of two LightningModule classes.
LIGHTNING_PACKAGES = ("pytorch_lightning", "lightning.pytorch")


def lightning_base(cls: type, name: str) -> type | None:
    """The class `name` (`LightningModule`, `LightningDataModule`) of whichever Lightning package
    `cls` derives from; None for a class of neither. Only an imported package can be a base."""
    bases = [getattr(sys.modules[p], name) for p in LIGHTNING_PACKAGES if p in sys.modules]
    return next((base for base in cls.__mro__ if base in bases), None)


def overrides(obj: Any, hook: str, base: str = "LightningModule") -> bool:
    """Whether `obj` (or, given a class, that class) defines its own `hook` rather than
    inheriting Lightning's (from the package it derives from); a class of neither package
    overrides every hook it has."""
    cls = obj if isinstance(obj, type) else type(obj)
    own = getattr(cls, hook, None)
    lightning = lightning_base(cls, base)
    return own is not None and (lightning is None or own is not getattr(lightning, hook, None))


def check_trainable(module: pl.LightningModule) -> None:
    """Refuses what a module may ask of a Trainer that fedlight would silently not do."""
    name = type(module).__name__
    if not module.automatic_optimization:
        raise ConfigError(
            f"{name} sets automatic_optimization = False; fedlight trains with Lightning's "
            "automatic optimization (training_step returns the loss, fedlight steps the optimizer "
            "from configure_optimizers): remove it and return the loss"
        )
    for hook in REFUSED_OVERRIDES:
        if overrides(module, hook):
            raise ConfigError(
                f"{name} overrides {hook}, which fedlight does not call (it runs loss.backward(), "
                "optimizer.zero_grad() and optimizer.step() itself, see docs/data-and-models.md "
                "'Your own model'); "
                "move that logic to on_before_backward, on_before_optimizer_step or "
                "configure_gradient_clipping"
            )


def setup_module(module: pl.LightningModule) -> None:
    """The hooks a Trainer calls once before fitting: layers a module builds there exist before
    fedlight reads its weights."""
    module.setup("fit")
    module.configure_model()


# Construction ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Offered:
    """What fedlight offers a module's constructor: the data's `input_shape` and `num_classes`,
    and the model group's settings taken from other groups (`lr: ${optim.lr}`, `momentum`,
    `weight_decay`). A constructor that does not take one reads it as `self.trainer.offered`."""

    input_shape: tuple[int, ...]
    num_classes: int
    settings: dict[str, Any]


@dataclass(frozen=True)
class ModelFactory:
    """Builds the client module as Lightning's CLI would: its constructor gets what the model
    config names (`given`, nested `_target_`s instantiated afresh at each build, under the run's
    seed), and of what fedlight offers only the arguments its signature takes; an argument it
    requires that nobody gives, or a given one it does not take, is one line."""

    target: str  # model._target_
    given: dict[str, Any]  # the model config's own settings
    offered: dict[str, Any]  # its settings interpolated from others (lr: ${optim.lr})

    def __post_init__(self) -> None:
        locate(self.target, "model._target_", "a LightningModule class, e.g. mypkg.MyModule")

    def offer(self, input_shape: Sequence[int], num_classes: int) -> Offered:
        return Offered(tuple(input_shape), num_classes, dict(self.offered))

    def __call__(self, input_shape: Sequence[int], num_classes: int) -> Any:
        build = locate(self.target, "model._target_", "a LightningModule class")
        offered = {"input_shape": input_shape, "num_classes": num_classes, **self.offered}
        given = self.instantiated()
        try:
            parameters = list(inspect.signature(build).parameters.values())
        except (TypeError, ValueError):  # a signature Python cannot read: called with all
            return build(**given, **offered)
        if any(p.kind is p.VAR_KEYWORD for p in parameters):
            return build(**given, **offered)
        named = [p for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        names = {p.name for p in named}
        for key in given:
            require(
                key in names,
                f"model.{key}: {self.target}'s constructor takes no {key!r}; remove it from the "
                "model config (or take it in the constructor)",
            )
        passed = given | {key: v for key, v in offered.items() if key in names}
        missing = [p.name for p in named if p.default is p.empty and p.name not in passed]
        if missing:
            raise ConfigError(
                f"model._target_={self.target}: its constructor requires {missing[0]!r}, which "
                f"neither the model config nor fedlight ({', '.join(offered)}) gives; set "
                f"+model.{missing[0]}=<value>"
            )
        return build(**passed)

    def instantiated(self) -> dict[str, Any]:
        """The given settings, nested `_target_`s (a network, a partial optimizer) built."""
        try:
            node = {"_target_": "builtins.dict", "_convert_": "all", **self.given}
            built = hydra.utils.instantiate(node)
        except InstantiationException as error:
            raise ConfigError(f"model: {one_line(error)}") from None
        return dict(built)


# Logging ------------------------------------------------------------------------------------------


def as_number(value: Any) -> float:
    """A number or the mean of a tensor's entries as a float (`self.log` takes one element, a
    Metric may compute several)."""
    return float(torch.as_tensor(value).detach().double().mean())


def mean_on_device(value: Tensor) -> Tensor:
    """A logged tensor (one element) as a 0-d tensor, left on its device (read once at the end,
    not at every step): at least float32, float64 kept."""
    return value.detach().to(torch.promote_types(value.dtype, torch.float32)).mean()


def metrics_of(module: pl.LightningModule) -> list[Metric]:
    return [m for m in module.modules() if isinstance(m, Metric)]


def no_distributed() -> bool:
    return False


@contextmanager
def local_metrics(module: pl.LightningModule) -> Iterator[None]:
    """Every torchmetrics Metric of the module reset, and computed without syncing across
    processes while inside: with several workers torch.distributed is up, and a Metric's
    `compute()` would wait for the other workers (which are not evaluating) instead of using this
    process's states. Each local training and each evaluation starts with empty metrics."""
    metrics = metrics_of(module)
    saved = [metric.distributed_available_fn for metric in metrics]
    for metric in metrics:
        metric.reset()
        metric.distributed_available_fn = no_distributed
    try:
        yield
    finally:
        for metric, available in zip(metrics, saved, strict=True):
            metric.distributed_available_fn = available


def computed(metric: Metric) -> float:
    """A logged Metric's value over every update since its last reset (then reset), as a
    Trainer computes it at the end of an epoch."""
    value = as_number(metric.compute())
    metric.reset()
    return value


@dataclass
class Logs:
    """Stands in for a Trainer's logging: what a module passes to `self.log`/`self.log_dict`.

    Values (tensors, numbers) wait in `pending` until the caller collects them with the weight
    they stand for; torchmetrics Metric objects logged for the epoch are kept by name in
    `metrics`, for the caller to compute once (dataset-level, not a mean of per-batch values).
    `batch_size=` is the weight of a value logged with it, as a Trainer's. `on_step`/`on_epoch`
    name values as a Trainer does: both on give `<name>_step` and `<name>_epoch`; a Metric's step
    value is its last batch's (its forward's), its epoch value computed over the epoch. Their
    defaults are a Trainer's: on_step in a training step's hooks (`stepping`), on_epoch elsewhere.
    `prog_bar`, `sync_dist` and the like change nothing here and are ignored."""

    pending: dict[str, tuple[Any, int | None]] = field(default_factory=dict)
    metrics: dict[str, Metric] = field(default_factory=dict)
    stepping: bool = False  # inside a training step's hooks (on_train_batch_start to _end)

    def log(
        self,
        name: str,
        value: Any,
        prog_bar: bool = False,
        logger: bool | None = None,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: str | Callable[..., Any] = "mean",
        *args: Any,
        batch_size: int | None = None,
        **kwargs: Any,
    ) -> None:
        if reduce_fx not in ("mean", torch.mean):
            raise ConfigError(
                f"the model logs {name!r} with reduce_fx={reduce_fx!r}; fedlight reduces every "
                "logged value to its mean weighted by batch size: log it with reduce_fx='mean'"
            )
        if logger is False:  # not for the loggers, as with a Trainer
            return
        step = self.stepping if on_step is None else on_step
        epoch = not self.stepping if on_epoch is None else on_epoch
        if step and epoch:
            self.file(f"{name}_step", value, batch_size, step=True)
            self.file(f"{name}_epoch", value, batch_size, step=False)
        else:
            self.file(name, value, batch_size, step=step)

    def file(self, name: str, value: Any, batch_size: int | None, step: bool) -> None:
        """One logged name: a Metric's step value is its forward's on the last batch (a Metric
        only updated has none, and is computed over the epoch instead)."""
        if isinstance(value, Metric):
            last_batch = getattr(value, "_forward_cache", None)  # torchmetrics' own record of it
            if not (step and isinstance(last_batch, Tensor)):
                self.metrics[name] = value
                return
            value = last_batch.mean()
        check_loggable(name, value)
        self.pending[name] = (value, batch_size)

    def log_dict(self, values: Mapping[str, Any], *args: Any, **kwargs: Any) -> None:
        for name, value in values.items():
            self.log(name, value, *args, **kwargs)

    def take(self) -> dict[str, tuple[Any, int | None]]:
        """The values logged since the last call (the last one per name), with their
        `batch_size` where given."""
        taken, self.pending = self.pending, {}
        return taken


def check_loggable(name: str, value: Any) -> None:
    """Refuses what a Trainer's `self.log` refuses (a value that is neither a number nor a tensor
    of one element), which fedlight would otherwise fail on (text) or silently average (a
    vector)."""
    if not isinstance(value, Tensor | numbers.Real):
        raise ConfigError(
            f"the model logs {name!r} as a {type(value).__name__} ({value!r:.40}); log a number, a "
            "tensor of one element or a torchmetrics Metric"
        )
    if isinstance(value, Tensor) and value.numel() != 1:
        raise ConfigError(
            f"the model logs {name!r} as a tensor of {value.numel()} elements; log one number per "
            f"name, as a Lightning Trainer requires (e.g. self.log({name!r}, value.mean()))"
        )


@contextmanager
def logging_to(module: pl.LightningModule, logs: Logs) -> Iterator[Logs]:
    """`module.log` and `module.log_dict` write to `logs` while inside."""
    module.log, module.log_dict = logs.log, logs.log_dict  # type: ignore[method-assign]
    try:
        yield logs
    finally:
        del module.log, module.log_dict


@dataclass
class TrainingLogs(Logs):
    """A client's logs over its local training: each value weighted by the examples it stands
    for (a step's batch, or `batch_size=`; the client's examples for a value logged once per
    epoch or per local training, in `on_train_epoch_end`, `on_train_start`, `on_train_end`), and
    each Metric logged for the epoch computed at the end of each local epoch (`end_epoch`, then
    reset, as a Trainer does) weighted by the client's examples; one the engine ends no epoch of
    is computed once over the local training. `sums()` gives name → (weighted sum, weight),
    which add up over clients and workers to the round's means (`round_means`): an accuracy's
    over every batch of the round."""

    steps: dict[str, list[tuple[Any, int]]] = field(default_factory=dict)
    examples: int = 0  # trained on so far

    def collect(self, weight: int) -> None:
        """Files what was logged since the last call under `weight` examples."""
        for name, (value, batch_size) in self.take().items():
            on_device = isinstance(value, Tensor) and value.device.type != "cpu"
            kept = mean_on_device(value) if on_device else as_number(value)
            weighed = weight if batch_size is None else batch_size
            self.steps.setdefault(name, []).append((kept, weighed))

    def end_epoch(self, weight: int) -> None:
        """Files each Metric logged for the epoch, computed over it, under `weight` examples."""
        for name, metric in self.metrics.items():
            self.steps.setdefault(name, []).append((computed(metric), weight))
        self.metrics = {}

    def sums(self) -> dict[str, tuple[float, float]]:
        """Name → (Σ weight·value, Σ weight); tensors leave the device once, at the end."""
        self.end_epoch(self.examples)
        tensors = [v for parts in self.steps.values() for v, _ in parts if isinstance(v, Tensor)]
        on_host = iter(torch.stack(tensors).cpu().double().tolist() if tensors else [])
        result = {}
        for name, parts in self.steps.items():
            values = [next(on_host) if isinstance(v, Tensor) else v for v, _ in parts]
            result[name] = (
                sum(v * w for v, (_, w) in zip(values, parts, strict=True)),
                float(sum(w for _, w in parts)),
            )
        return result


def round_means(parts: Sequence[Mapping[str, Sequence[float]]]) -> dict[str, float]:
    """Each name's weighted mean over the (weighted sum, weight) pairs of several clients."""
    totals: dict[str, list[float]] = {}
    for sums in parts:
        for name, (total, weight) in sums.items():
            entry = totals.setdefault(name, [0.0, 0.0])
            entry[0] += total
            entry[1] += weight
    return {name: total / weight for name, (total, weight) in totals.items() if weight}


# Optimizers and lr schedulers ---------------------------------------------------------------------

FORMS = (
    "return an optimizer, {'optimizer': ..., 'lr_scheduler': ...} (the scheduler or its dict with "
    "'scheduler', 'interval', 'frequency'), or ([optimizer], [schedulers])"
)


@dataclass(frozen=True)
class Scheduler:
    """An lr scheduler with the `interval` ("epoch" or "step") and `frequency` it steps at."""

    scheduler: Any
    interval: str = "epoch"
    frequency: int = 1


@dataclass(frozen=True)
class Optimization:
    """What `configure_optimizers()` returned, in any form Lightning accepts for automatic
    optimization: the one optimizer and its schedulers."""

    optimizer: torch.optim.Optimizer
    schedulers: tuple[Scheduler, ...] = ()

    def after_step(
        self, module: pl.LightningModule, batch_idx: int, epoch: int, last_of_epoch: bool
    ) -> None:
        """The schedulers a Trainer steps after the optimizer step of batch `batch_idx` (of the
        epoch) of epoch `epoch`: `interval: step` ones every `frequency` batches of the epoch,
        then, after its last batch, `interval: epoch` ones every `frequency` epochs."""
        for entry in self.schedulers:
            if entry.interval == "step" and (batch_idx + 1) % entry.frequency == 0:
                module.lr_scheduler_step(entry.scheduler, None)
        if last_of_epoch:
            for entry in self.schedulers:
                if entry.interval == "epoch" and (epoch + 1) % entry.frequency == 0:
                    module.lr_scheduler_step(entry.scheduler, None)


def optimization_of(configured: Any) -> Optimization:
    """`configure_optimizers()`'s return value parsed as a Trainer parses it; refuses (one line)
    several optimizers (Lightning's automatic optimization trains one), a scheduler of another
    optimizer and a `ReduceLROnPlateau`."""
    optimizers, schedulers = optimizers_and_schedulers(configured)
    if len(optimizers) != 1:
        raise ConfigError(
            f"model: configure_optimizers() returned {len(optimizers)} optimizers; fedlight trains "
            "with automatic optimization, which steps one: " + FORMS
        )
    (optimizer,) = optimizers
    parsed = tuple(scheduler_of(entry) for entry in schedulers)
    for entry in parsed:
        if getattr(entry.scheduler, "optimizer", optimizer) is not optimizer:
            raise ConfigError(
                f"model: configure_optimizers() returned a {type(entry.scheduler).__name__} of "
                "another optimizer than the one it returned; build it on that optimizer"
            )
    return Optimization(optimizer, parsed)


def optimizers_and_schedulers(configured: Any) -> tuple[list[Any], list[Any]]:
    """The optimizers and the scheduler entries of any form Lightning accepts."""
    if isinstance(configured, torch.optim.Optimizer):
        return [configured], []
    if isinstance(configured, dict) and "optimizer" in configured:
        scheduler = configured.get("lr_scheduler")
        return [configured["optimizer"]], [] if scheduler is None else [scheduler]
    if isinstance(configured, list | tuple) and configured:
        first = configured[0]
        if len(configured) == 2 and isinstance(first, list | tuple) and are_optimizers(first):
            schedulers = configured[1]
            return list(first), list(schedulers) if isinstance(schedulers, list | tuple) else [
                schedulers
            ]
        if all(isinstance(d, dict) and "optimizer" in d for d in configured):
            pairs = [optimizers_and_schedulers(d) for d in configured]
            return [o for os, _ in pairs for o in os], [s for _, ss in pairs for s in ss]
        if are_optimizers(configured):
            return list(configured), []
    raise ConfigError(
        f"model: configure_optimizers() returned {type(configured).__name__}, not a form "
        f"Lightning accepts; {FORMS}"
    )


def are_optimizers(items: Any) -> bool:
    return bool(items) and all(isinstance(o, torch.optim.Optimizer) for o in items)


def scheduler_of(entry: Any) -> Scheduler:
    """One scheduler entry: the scheduler, or Lightning's dict with `scheduler`, `interval`,
    `frequency` (`monitor`, `name`, `strict` do not apply here)."""
    config = dict(entry) if isinstance(entry, dict) else {"scheduler": entry}
    scheduler = config.get("scheduler")
    if scheduler is None:
        raise ConfigError(
            "model: configure_optimizers() returned an lr_scheduler dict without 'scheduler'; "
            + FORMS
        )
    interval, frequency = config.get("interval", "epoch"), config.get("frequency", 1)
    kind = type(scheduler).__name__
    if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau) or config.get(
        "reduce_on_plateau"
    ):
        raise ConfigError(
            f"model: configure_optimizers() returned a {kind}, which needs a monitored value that "
            "a client's local training does not produce; use lr_schedule=plateau (the same rule "
            "per round, on the server's evaluation), or a scheduler on steps or epochs (e.g. "
            "StepLR)"
        )
    if interval not in ("epoch", "step"):
        raise ConfigError(
            f"model: the lr_scheduler dict's interval is {interval!r}; use 'epoch' or 'step'"
        )
    if not isinstance(frequency, int) or frequency < 1:
        raise ConfigError(
            f"model: the lr_scheduler dict's frequency is {frequency!r}; use an integer >= 1"
        )
    return Scheduler(scheduler, interval, frequency)


# Gradient clipping --------------------------------------------------------------------------------


def clips_gradients(module: pl.LightningModule, local: LocalSettings) -> bool:
    """Whether a step calls `configure_gradient_clipping`: the module overrides it, or
    `local.gradient_clip_val` is set (a Trainer calls it at every step; fedlight skips the call
    where it would do nothing)."""
    return overrides(module, "configure_gradient_clipping") or bool(local.gradient_clip_val)


@contextmanager
def clipping_by(module: pl.LightningModule, local: LocalSettings) -> Iterator[None]:
    """`module.clip_gradients` (which needs a Trainer) clips as a Trainer with
    `gradient_clip_val=local.gradient_clip_val` and `gradient_clip_algorithm=
    local.gradient_clip_algorithm` would, while inside."""

    def clip_gradients(
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        clip_val = settled("gradient_clip_val", gradient_clip_val, local.gradient_clip_val)
        algorithm = settled(
            "gradient_clip_algorithm", gradient_clip_algorithm, local.gradient_clip_algorithm
        )
        clip(optimizer, clip_val or 0.0, algorithm or "norm")

    module.clip_gradients = clip_gradients  # type: ignore[method-assign]
    try:
        yield
    finally:
        del module.clip_gradients


def settled(key: str, passed: Any, setting: Any) -> Any:
    """A Trainer's rule: the module's value or the setting, refused when both are set and differ."""
    if passed is not None and setting is not None and passed != setting:
        raise ConfigError(
            f"local.{key}={setting} and the model's configure_gradient_clipping passes "
            f"{key}={passed}; set only one of them (e.g. local.{key}=null)"
        )
    return setting if passed is None else passed


# How `local.gradient_clip_algorithm` clips (Lightning's GradClipAlgorithmType).
CLIPPERS: dict[str, Callable[[list[Tensor], float], Any]] = {
    "norm": torch.nn.utils.clip_grad_norm_,
    "value": torch.nn.utils.clip_grad_value_,
}


def clip(optimizer: torch.optim.Optimizer, clip_val: float, algorithm: str) -> None:
    """Clips the gradients of the optimizer's parameters as Lightning's precision plugin: to
    `clip_val` per entry (`value`) or in total L2 norm (`norm`); nothing for `clip_val` <= 0."""
    if clip_val <= 0:
        return
    if algorithm not in CLIPPERS:
        raise ConfigError(
            f"the model clips with gradient_clip_algorithm={algorithm!r}; use 'norm' or 'value'"
        )
    CLIPPERS[algorithm]([p for group in optimizer.param_groups for p in group["params"]], clip_val)
