"""`self.trainer` of a client module: a stand-in for the Lightning Trainer fedlight does not build
(`fedlight.engines.lightning`), with the fields modules commonly read and those LightningModule's
own API reads (`self.optimizers()`, `self.lr_schedulers()`, `self.global_rank`, `self.print`).

A client's local training in a round is one fit of `local.epochs` epochs, so `current_epoch`
counts its local epochs from 0 (E in `on_train_end`, after the last, as a Trainer's) and
`global_step` its optimizer steps from 0, and `estimated_stepping_batches` is its steps (a
OneCycleLR built on it ends with the training). Outside a client's training (the module's
`setup`, the driver's first look at `configure_optimizers`, evaluation) the per-training fields
answer for a client of the federation's mean size. Each client trains alone in one process, as
on a Trainer of one device: rank 0 of a world of 1. Any other field is refused in one line naming
it: fedlight would otherwise give a value that means nothing here.
"""

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from fedlight.core.errors import ConfigError
from fedlight.engines.lightning import Offered
from fedlight.engines.module_optim import Scheduler

FIELDS = (
    "model",
    "global_rank",
    "local_rank",
    "current_epoch",
    "global_step",
    "max_epochs",
    "estimated_stepping_batches",
    "num_training_batches",
    "is_global_zero",
    "logger",
    "loggers",
    "optimizers",
    "lr_scheduler_configs",
    "sanity_checking",
    "progress_bar_callback",
    "offered",
)


class TrainerFieldError(ConfigError, AttributeError):
    """A module read a Trainer field the stand-in does not have (an AttributeError too, so that
    `hasattr(self.trainer, ...)` and `getattr(..., default)` answer as for a missing field)."""


class StrategyStandIn:
    """`self.trainer.strategy`, for `self.optimizers()` alone (which reads the optimizers the
    strategy wraps; fedlight's are the plain torch optimizers, stepped by fedlight): any field a
    module reads itself is refused in one line naming it, as the stand-in's are."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]) -> None:
        self._lightning_optimizers = optimizers

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise refusal(f"strategy.{name}", "its strategy serves self.optimizers() alone")


def refusal(name: str, has: str = f"it has {', '.join(FIELDS)}") -> TrainerFieldError:
    """The one line for a field the stand-in does not have."""
    return TrainerFieldError(
        f"the model reads self.trainer.{name}, which fedlight's Trainer stand-in does not "
        f"have (it builds no Trainer); {has} (docs/data-and-models.md, 'Your own model')"
    )


@dataclass
class TrainerStandIn:
    """The fields of `self.trainer` (FIELDS); see the module docstring."""

    model: nn.Module = field(repr=False)  # a Trainer's is the module itself on one device
    max_epochs: int  # local.epochs
    batch_size: int | None  # local.batch_size (None: B = ∞, the client's examples)
    examples: int  # the client's training examples (the federation's mean outside training)
    offered: Offered  # what fedlight offered the constructor (lightning.ModelFactory)
    current_epoch: int = 0
    global_step: int = 0
    optimizers: list[torch.optim.Optimizer] = field(default_factory=list)
    lr_scheduler_configs: list[Scheduler] = field(default_factory=list)
    is_global_zero: bool = True  # each worker trains its clients alone
    logger: None = None  # what the module logs goes to fedlight's loggers (`self.log`)
    loggers: list[Any] = field(default_factory=list)
    sanity_checking: bool = False  # fedlight runs no sanity check
    global_rank: int = 0  # each client trains alone: rank 0 of one process (also local_rank)
    local_rank: int = 0
    progress_bar_callback: None = None  # none: `self.print` prints

    @property
    def num_training_batches(self) -> int:
        return math.ceil(self.examples / (self.batch_size or max(self.examples, 1)))

    @property
    def estimated_stepping_batches(self) -> int:
        return self.max_epochs * self.num_training_batches

    @property
    def strategy(self) -> StrategyStandIn:
        """What `LightningModule.optimizers()` reads of a Trainer's strategy."""
        return StrategyStandIn(self.optimizers)

    def __getattr__(self, name: str) -> Any:
        # only for names that are not fields: a Trainer's others mean nothing here
        if name.startswith("__"):
            raise AttributeError(name)
        raise refusal(name)

    @contextmanager
    def local_training(self, examples: int, epochs: int) -> Iterator["TrainerStandIn"]:
        """The fields of one client's local training of `epochs` epochs on `examples` examples,
        counted from 0; the mean-client fields again after it."""
        outside = self.examples, self.max_epochs
        self.examples, self.max_epochs = examples, epochs
        self.current_epoch = self.global_step = 0
        try:
            yield self
        finally:
            self.examples, self.max_epochs = outside
            self.current_epoch = self.global_step = 0
            self.optimizers, self.lr_scheduler_configs = [], []


def attach(module: nn.Module, standin: TrainerStandIn) -> None:
    """`module.trainer` is `standin` from now on (and each child LightningModule's)."""
    module.trainer = standin


def standin_of(module: nn.Module, epochs: int, batch_size: int | None) -> TrainerStandIn:
    """The module's stand-in, attached now (with `epochs`, `batch_size` and an unknown client
    size) where the module was not built by `fedlight.runs.experiment.build_module`."""
    found = vars(module).get("_trainer", vars(module).get("trainer"))  # a duck-typed one's
    if isinstance(found, TrainerStandIn):
        return found
    standin = TrainerStandIn(module, epochs, batch_size, batch_size or 1, Offered((), 0, {}))
    attach(module, standin)
    return standin
