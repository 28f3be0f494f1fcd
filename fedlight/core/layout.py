"""The memory layout a client module trains and evaluates in (`fl.memory_format`).

Convolutions on the CPU run oneDNN's kernels, which prefer channels-last (NHWC) tensors: with the
weights of every 2-D convolution and the image batches stored channels-last, NIID-Bench's LeNet
(`simple_cnn`, B = 64) trains about 1.5× faster per thread here, McMahan's `cnn` and the CIFAR-10
CNN less (docs/speed-and-memory.md). The layout changes no value an elementwise operation computes,
but a convolution's kernel adds its products in another order, so the numbers differ in float
rounding from the contiguous layout's: `fl.memory_format=contiguous` gives the numbers of fedlight
before the layout became the default, digit for digit.

`auto` picks channels-last for a module with a 2-D convolution on the CPU and contiguous
otherwise (a module without convolutions has nothing to gain; on CUDA fp32 the gain is unmeasured
here, so it keeps cuDNN's default). The choice is deterministic (never timed), so the same config
gives the same numbers on every run, and summary.json's `environment.memory_format` records it.

Only the module's own tensors and the input batches take the layout: the weights an engine hands
out are contiguous (`contiguous_state`), so aggregation, codecs, checkpoints and exported models
see the same tensors whichever layout trained them.
"""

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor, nn

from fedlight.core.tensors import StateDict

MEMORY_FORMATS = ("auto", "channels_last", "contiguous")


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


def layout_for(setting: str, module: nn.Module, device: torch.device) -> Layout:
    """The layout `fl.memory_format=setting` (one of MEMORY_FORMATS, checked by the settings)
    gives this module on this device."""
    if setting == "auto":
        fast = device.type == "cpu" and has_conv2d(module)
        setting = "channels_last" if fast else "contiguous"
    return LAYOUTS[setting]


def contiguous_state(state: StateDict) -> StateDict:
    """The state with every tensor contiguous: a module's own tensors where they already are, a
    contiguous copy of the others."""
    return {name: t if t.is_contiguous() else t.contiguous() for name, t in state.items()}
