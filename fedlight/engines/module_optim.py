"""A module's `configure_optimizers()` without a Trainer: the optimizer and lr schedulers in any
form Lightning accepts for automatic optimization, stepped as a Trainer steps them, and gradient
clipping (`local.gradient_clip_val` or the module's `configure_gradient_clipping`)."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor

from fedlight.core.errors import ConfigError
from fedlight.core.settings import LocalSettings
from fedlight.engines.lightning import overrides
from fedlight.engines.module_logs import RefusedLogs, logging_to

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


def configured_optimization(module: pl.LightningModule) -> Optimization:
    """The module's `configure_optimizers()` called and parsed; `self.log` there is refused, as
    a Trainer refuses it."""
    with logging_to(module, RefusedLogs(hook="configure_optimizers")):
        return optimization_of(module.configure_optimizers())


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
