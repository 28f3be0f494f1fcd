"""The memory layout a client module trains and evaluates in (`fl.memory_format`).

Convolutions on the CPU run oneDNN's kernels, which prefer channels-last (NHWC) tensors: with the
weights of every 2-D convolution and the image batches stored channels-last, NIID-Bench's LeNet
(`simple_cnn`, B = 64) trains about 1.5× faster per thread here, McMahan's `cnn` and the CIFAR-10
CNN less (docs/speed-and-memory.md). The layout changes no value an elementwise operation computes,
but a convolution's kernel adds its products in another order, so the numbers differ in float
rounding from the contiguous layout's: `fl.memory_format=contiguous` gives the numbers of fedlight
before the layout became the default, digit for digit.

`auto` picks channels-last for a module with a 2-D convolution on the CPU whose training step is
shown to run in it, and contiguous otherwise (a module without convolutions has nothing to gain; on
CUDA fp32 the gain is unmeasured here, so it keeps cuDNN's default). A user's module may flatten a
convolution's output with `x.view(x.size(0), -1)`, which a channels-last tensor refuses, and may
do so only in eval mode, in `test_step` or from its second batch on: so the module is tried first
on a copy of it, under a forked random state (the run's numbers are those it would have without
the trial), with what a run calls of it on one batch: two `training_step`s (batch_idx 0 and 1)
with their backward, `forward` in eval mode, and its `test_step` and `validation_step`. The
choice is deterministic (never timed), so the same config gives the same numbers on every run, the
console says which it chose and why (the call that failed), and summary.json's
`environment.memory_format` records it. A forced `channels_last` that one of these calls fails in
(and contiguous does not) is refused in one line naming `fl.memory_format=contiguous`. Code that
changes with later batches or rounds is not tried: where it fails in channels-last, set
`fl.memory_format=contiguous`.

Only the module's own tensors and the input batches take the layout: the weights an engine hands
out are contiguous (`contiguous_state`), so aggregation, codecs, checkpoints and exported models
see the same tensors whichever layout trained them.
"""

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from fedlight.core.errors import ConfigError, one_line
from fedlight.core.tensors import StateDict


@dataclass(frozen=True)
class Layout:
    """A memory layout: what it does to the module and to a batch of inputs."""

    name: ClassVar[str] = "contiguous"
    memory_format: ClassVar[torch.memory_format] = torch.contiguous_format

    def apply(self, module: nn.Module) -> nn.Module:
        """The module with its 4-D parameters and buffers in this layout (in place)."""
        return module.to(memory_format=self.memory_format)

    def inputs(self, batch: Tensor) -> Tensor:
        """A batch of images in this layout; other tensors as they are."""
        if batch.dim() != 4 or batch.is_contiguous(memory_format=self.memory_format):
            return batch
        return batch.contiguous(memory_format=self.memory_format)


@dataclass(frozen=True)
class ChannelsLast(Layout):
    name: ClassVar[str] = "channels_last"
    memory_format: ClassVar[torch.memory_format] = torch.channels_last


CONTIGUOUS = Layout()
LAYOUTS: dict[str, Layout] = {"contiguous": CONTIGUOUS, "channels_last": ChannelsLast()}


def has_conv2d(module: nn.Module) -> bool:
    """Whether the module has 4-D parameters: the weights of 2-D convolutions."""
    return any(p.dim() == 4 for p in module.parameters())


@dataclass(frozen=True)
class LayoutChoice:
    """The layout a run's module takes and why (the console's line under `auto`)."""

    layout: Layout
    reason: str


def training_steps(trial: Any, batch: tuple[Tensor, Tensor]) -> None:
    """Two training steps with their backward: a module may flatten from its second batch on."""
    trial.train()
    for batch_idx in (0, 1):
        output = trial.training_step(batch, batch_idx)
        loss = output.get("loss") if isinstance(output, dict) else output
        loss.backward()


def forward_in_eval_mode(trial: Any, batch: tuple[Tensor, Tensor]) -> None:
    """What the evaluation asks of a classifier: its logits, in eval mode, without gradients."""
    trial.eval()
    with torch.inference_mode():
        trial(batch[0])


def evaluation_step(step: str) -> Callable[[Any, tuple[Tensor, Tensor]], None]:
    """The module's own `test_step` or `validation_step` on two batches, as evaluation runs it."""

    def run(trial: Any, batch: tuple[Tensor, Tensor]) -> None:
        trial.eval()
        with torch.inference_mode():
            for batch_idx in (0, 1):
                getattr(trial, step, lambda *args: None)(batch, batch_idx)

    return run


TRAINING = "training step"
# What a run calls of the module, by the name the console's line gives it.
TRIAL_CALLS: dict[str, Callable[[Any, tuple[Tensor, Tensor]], None]] = {
    TRAINING: training_steps,
    "forward in eval mode": forward_in_eval_mode,
    "test_step": evaluation_step("test_step"),
    "validation_step": evaluation_step("validation_step"),
}


def trial_failures(
    module: nn.Module, batch: tuple[Tensor, Tensor], layout: Layout
) -> dict[str, str]:
    """Which of the calls a run makes of the module (TRIAL_CALLS) fail in `layout` on `batch`,
    each with why in one line. On a copy of the module, under a forked random state, with
    `self.log` a no-op (no Trainer yet): the module, its optimizer-to-be and the run's draws are
    untouched."""
    device = next(module.parameters()).device
    cuda = [device.index or 0] if device.type == "cuda" else []
    failures: dict[str, str] = {}
    with torch.random.fork_rng(devices=cuda):
        try:
            trial: Any = layout.apply(copy.deepcopy(module))
        except Exception as failure:  # noqa: BLE001 - the layout is not shown to work
            return {TRAINING: one_line(failure, limit=300)}
        trial.log = trial.log_dict = lambda *args, **kwargs: None
        inputs = layout.inputs(batch[0]), batch[1]
        for name, call in TRIAL_CALLS.items():
            try:
                call(trial, inputs)
            except Exception as failure:  # noqa: BLE001 - any failure: not shown to work
                failures[name] = one_line(failure, limit=300)
    return failures


def layout_for(
    setting: str, module: nn.Module, device: torch.device, batch: tuple[Tensor, Tensor]
) -> LayoutChoice:
    """The layout `fl.memory_format=setting` (one of the settings' MEMORY_FORMATS)
    gives this module on this device, tried on `batch` (contiguous model inputs and labels)
    where channels-last is wanted. `auto` takes it where the training step and every other call
    that runs contiguous run in it; a forced channels-last that a call fails in (and contiguous
    does not) is refused."""
    name = type(module).__name__
    if setting == "contiguous":
        return LayoutChoice(CONTIGUOUS, "as set")
    if setting == "auto" and device.type != "cpu":
        return LayoutChoice(CONTIGUOUS, f"on {device.type}, its default")
    if setting == "auto" and not has_conv2d(module):
        return LayoutChoice(CONTIGUOUS, f"{name} has no 2-D convolution")
    channels_last = LAYOUTS["channels_last"]
    failed = trial_failures(module, batch, channels_last)
    if not failed:
        return LayoutChoice(channels_last, f"{name}'s steps run in it")
    own = trial_failures(module, batch, CONTIGUOUS)  # the module's failures, whatever the layout
    layouts = {call: failure for call, failure in failed.items() if call not in own}
    if setting == "auto":
        faults = layouts | ({TRAINING: failed[TRAINING]} if TRAINING in failed else {})
        if not faults:
            either = ", ".join(failed)
            return LayoutChoice(channels_last, f"{name}'s steps run in it ({either}: in neither)")
        call, failure = next(iter(faults.items()))
        return LayoutChoice(CONTIGUOUS, f"{name}'s {call} fails in channels_last: {failure}")
    if layouts:
        call, failure = next(iter(layouts.items()))
        raise ConfigError(
            f"fl.memory_format=channels_last: {name}'s {call} fails in the channels-last layout "
            f"({failure}); set fl.memory_format=contiguous (or auto, which tries it first)"
        )
    return LayoutChoice(channels_last, "as set (the steps fail in either layout: not the layout's)")


def contiguous_state(state: StateDict) -> StateDict:
    """The state with every tensor contiguous: a module's own tensors where they already are, a
    contiguous copy of the others."""
    return {name: t if t.is_contiguous() else t.contiguous() for name, t in state.items()}
