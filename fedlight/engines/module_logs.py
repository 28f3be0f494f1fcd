"""A module's `self.log`/`self.log_dict` without a Trainer: what fedlight collects of a client's
logged values and Metric objects (`on_step`/`on_epoch` as Lightning means them), and how a round's
clients add up (fedlight.engines.lightning calls the hooks that log)."""

import numbers
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor
from torchmetrics import Metric

from fedlight.core.errors import ConfigError


def as_number(value: Any) -> float:
    """A number or a tensor of one element (what `self.log` takes) as a float: a Python int
    exactly where a float holds it, a Python float as a Trainer keeps it (float32)."""
    if isinstance(value, int):
        return float(value)
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


def computed(metrics: Mapping[str, Metric]) -> dict[str, float]:
    """Each logged Metric's value over every update since its last reset, as a Trainer computes
    them at the end of an epoch: each object once (one Metric under two names gives both its
    value; a second compute would read it reset), then reset."""
    values: dict[int, float] = {}
    for name, metric in metrics.items():
        if id(metric) not in values:
            values[id(metric)] = as_number(metric_number(name, metric, metric.compute()))
    for metric in {id(metric): metric for metric in metrics.values()}.values():
        metric.reset()
    return {name: values[id(metric)] for name, metric in metrics.items()}


def metric_number(name: str, metric: Metric, value: Any) -> Any:
    """A Metric's value (its compute's or its forward's), refused where it is several numbers,
    as a tensor logged is (a per-class accuracy would otherwise become its mean)."""
    count = value.numel() if isinstance(value, Tensor) else 1
    if count != 1:
        raise ConfigError(
            f"the model logs {name!r} as a Metric ({type(metric).__name__}) that computes {count} "
            "values; log one number per name (e.g. the Metric with average='macro', or each value "
            "under its own name)"
        )
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
    evaluating_step: bool = False  # inside `test_step`/`validation_step`

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
        check_name(name)
        step = self.stepping if on_step is None else on_step
        epoch = not self.stepping if on_epoch is None else on_epoch
        if not (self.stepping or self.evaluating_step) and (step or not epoch):
            level = "on_step=True" if step else "on_epoch=False"
            raise ConfigError(
                f"the model logs {name!r} with {level} outside a step (in an epoch's or the "
                "training's hook), which a Lightning Trainer refuses too: log it there with "
                "on_step and on_epoch at their defaults"
            )
        if logger is False or not (step or epoch):  # for no logger, as with a Trainer
            return
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
            value = metric_number(name, value, last_batch)
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
    of one element), which fedlight would otherwise fail on (text, an int beyond a float) or
    silently average (a vector) or cut to its real part (a complex tensor)."""
    reason = unloggable(name, value)
    if reason is not None:
        raise ConfigError(f"the model logs {name!r} {reason}")


def unloggable(name: str, value: Any) -> str | None:
    """Why `value` is no number a column can hold, in words that name the fix; None if it is."""
    if not isinstance(value, Tensor | numbers.Real):
        return (
            f"as a {type(value).__name__} ({value!r:.40}); log a number, a tensor of one element "
            "or a torchmetrics Metric"
        )
    if isinstance(value, numbers.Integral) and not holds_a_float(value):
        return "as an int too large for a float; log a number a float can hold"
    if isinstance(value, Tensor) and value.is_complex():
        return "as a complex tensor; log its real part, imaginary part or magnitude by name"
    if isinstance(value, Tensor) and value.numel() != 1:
        return (
            f"as a tensor of {value.numel()} elements; log one number per name, as a Lightning "
            f"Trainer requires (e.g. self.log({name!r}, value.mean()))"
        )
    return None


def holds_a_float(value: numbers.Integral) -> bool:
    try:
        float(value)
    except OverflowError:
        return False
    return True


def check_name(name: str) -> None:
    """A logged name becomes a column of metrics.csv and a word of the console's round line: it
    must be text of one line."""
    if not isinstance(name, str) or not name or not name.isprintable():
        raise ConfigError(
            f"the model logs a value under the name {name!r}; name it with printable text on one "
            "line (it becomes a column of metrics.csv and of the console's round lines)"
        )


@contextmanager
def logging_to(module: pl.LightningModule, logs: Logs) -> Iterator[Logs]:
    """`module.log` and `module.log_dict` write to `logs` while inside (and to whatever they
    wrote to before, after)."""
    outer = {name: vars(module)[name] for name in ("log", "log_dict") if name in vars(module)}
    module.log, module.log_dict = logs.log, logs.log_dict  # type: ignore[method-assign]
    try:
        yield logs
    finally:
        del module.log, module.log_dict
        for name, method in outer.items():
            setattr(module, name, method)


@dataclass
class RefusedLogs(Logs):
    """`self.log` in a hook where a Trainer refuses it (`setup`, `configure_model`,
    `configure_optimizers`: no step or epoch to log for), refused in one line naming the hook."""

    hook: str = ""

    def log(self, name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        raise ConfigError(
            f"the model calls self.log in {self.hook}(), which a Lightning Trainer refuses too "
            f"(no step or epoch to log {name!r} for); log it in a training or evaluation hook"
        )


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
        for name, value in computed(self.metrics).items():
            self.steps.setdefault(name, []).append((value, weight))
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
