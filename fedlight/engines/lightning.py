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
`batch_idx` in training counts the batches of each local epoch from 0, as a Trainer's does. Not
called, as there is no Trainer: `on_fit_start`/`end` and `teardown` (a
run is not one fit), `configure_callbacks` (callbacks need a Trainer), `on_save_checkpoint`/
`on_load_checkpoint` (fedlight checkpoints the state dicts itself), the data hooks
(`prepare_data`, `*_dataloader`, `transfer_batch_to_device`, `on_*_batch_transfer`: the `data`
group's tensors are already on the device), validation during training and `predict_step`.
Refused in one line, since they change the arithmetic of a step and fedlight would ignore them:
manual optimization (`automatic_optimization = False`) and overrides of `backward`,
`optimizer_step` and `optimizer_zero_grad`; a `ReduceLROnPlateau` (it needs a monitored value
per epoch, which a client's local training does not produce).

`self.log`/`self.log_dict` work in every hook above but `setup`, `configure_model` and
`configure_optimizers`, where a Trainer refuses them too: `Logs` (fedlight.engines.module_logs)
stands in for the Trainer's logging (`on_step`/`on_epoch` included) and, as it does, refuses a
value that is not a number, a tensor of one element or a Metric; `configure_optimizers()` is read
and its schedulers stepped as a Trainer would (fedlight.engines.module_optim). `self.trainer` is a
stand-in with the fields modules commonly read (`fedlight.engines.trainer_standin`). A module is
built as Lightning's CLI builds it (`ModelFactory`), and may come from either Lightning package
(`lightning.pytorch` or `pytorch_lightning`, `overrides`).
"""

import inspect
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import hydra
import pytorch_lightning as pl
from hydra.errors import InstantiationException

from fedlight.core.dotted import locate
from fedlight.core.errors import ConfigError, one_line, require
from fedlight.engines.module_logs import RefusedLogs, logging_to

# The hooks fedlight calls on every client module: a LightningModule has them all, a class of
# neither Lightning package must define them.
CALLED_HOOKS = (
    "training_step",
    "configure_optimizers",
    "setup",
    "configure_model",
    "on_train_start",
    "on_train_epoch_start",
    "on_train_batch_start",
    "on_before_zero_grad",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "lr_scheduler_step",
    "on_train_batch_end",
    "on_train_epoch_end",
    "on_train_end",
)
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
    fedlight reads its weights; `self.log` there is refused, as a Trainer refuses it. A module
    without the hooks fedlight calls (a plain torch network) is refused in one line."""
    missing = [hook for hook in CALLED_HOOKS if not callable(getattr(module, hook, None))]
    if missing:
        raise ConfigError(
            f"model: {type(module).__name__} is no LightningModule (it has no "
            f"{', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}); derive it from "
            "lightning.LightningModule and define training_step and configure_optimizers "
            "(docs/data-and-models.md, 'Your own model')"
        )
    with logging_to(module, RefusedLogs(hook="setup")):
        module.setup("fit")
    with logging_to(module, RefusedLogs(hook="configure_model")):
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
    seed), and of what fedlight offers only the arguments its signature takes (positional-only
    ones by position); an argument it requires that nobody gives, or a given one it does not
    take, is one line."""

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
        named = [p for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
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
        positional = [p for p in named if p.kind is p.POSITIONAL_ONLY]
        args = [passed.pop(p.name, p.default) for p in positional]  # each given or its default
        return build(*args, **passed)

    def instantiated(self) -> dict[str, Any]:
        """The given settings, nested `_target_`s (a network, a partial optimizer) built."""
        try:
            node = {"_target_": "builtins.dict", "_convert_": "all", **self.given}
            built = hydra.utils.instantiate(node)
        except InstantiationException as error:
            raise ConfigError(f"model: {one_line(error)}") from None
        return dict(built)
