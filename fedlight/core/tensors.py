"""Model states as plain name→tensor dicts: what the server stores, sends and averages."""

import torch
from torch import Tensor

StateDict = dict[str, Tensor]


def nbytes(state: StateDict) -> int:
    """Exact size in bytes of the tensors as they would travel over the network."""
    return sum(t.numel() * t.element_size() for t in state.values())


def detached_copy(state: StateDict) -> StateDict:
    """A copy of every tensor, contiguous whatever the layout it was kept in."""
    return {
        name: t.detach().clone(memory_format=torch.contiguous_format) for name, t in state.items()
    }


def subtract(a: StateDict, b: StateDict) -> StateDict:
    return {name: a[name] - b[name] for name in a}


def on_device(state: StateDict, device: torch.device) -> StateDict:
    """The tensors moved to `device` (a checkpoint is loaded on the CPU)."""
    return {name: t.to(device) for name, t in state.items()}
