"""Random-k sparsification, the control for top-k (Stich et al., NeurIPS 2018; Wangni et al.,
NeurIPS 2018): each float32 tensor sends k = ⌈ratio·n⌉ entries at positions drawn from the
derived generator (seed, WIRE, round, client), scaled by n/k so that the decoded tensor is an
unbiased estimate. The receiver draws the same positions from the same generator, so only the
values and the shape (the payload's metadata) travel: 4k bytes per tensor. Error feedback is off
by default (the estimate is unbiased); `error_feedback: true` keeps e ← (Δ + e) − decoded per
client.
"""

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.core.rng import Stream
from fedlight.core.tensors import StateDict
from fedlight.stages.compression.topk import SHAPE, VALUES
from fedlight.stages.wire.base import LossyTransform, Payload


@dataclass
class RandK(LossyTransform):
    ratio: float = 0.1  # share of entries sent
    error_feedback: bool = False

    def __post_init__(self) -> None:
        require(
            0 < self.ratio <= 1,
            f"compression.ratio={self.ratio} must be in (0, 1] (the share of entries sent)",
        )

    def positions(self, generator: torch.Generator, size: int, device: torch.device) -> Tensor:
        """k sorted positions of 0 … size − 1, drawn without replacement."""
        k = math.ceil(self.ratio * size)
        return torch.randperm(size, generator=generator)[:k].sort().values.to(device)

    def encode_values(self, ctx: RoundContext, client: int, tensors: Payload) -> Payload:
        generator = ctx.torch_generator(Stream.WIRE, client)
        payload: StateDict = {}
        metadata = set(tensors.metadata)
        for name, t in tensors.items():
            if not self.compresses(name, t, tensors):
                payload[name] = t
                continue
            flat = t.reshape(-1)
            chosen = self.positions(generator, flat.numel(), flat.device)
            scale = flat.numel() / chosen.numel()
            payload[name + VALUES] = flat[chosen] * scale
            payload[name + SHAPE] = torch.tensor(list(t.shape), dtype=torch.int32)
            metadata.add(name + SHAPE)
        return Payload(payload, metadata)

    def decode(
        self, ctx: RoundContext, client: int, payload: StateDict, state: StateDict | None
    ) -> tuple[StateDict, StateDict | None]:
        generator = ctx.torch_generator(Stream.WIRE, client)
        names = {key.removesuffix(SHAPE) for key in payload if key.endswith(SHAPE)}
        decoded: StateDict = {}
        for key, t in payload.items():
            if key.endswith(SHAPE):
                name = key.removesuffix(SHAPE)
                shape = torch.Size(t.tolist())
                values = payload[name + VALUES]
                dense = torch.zeros(shape.numel(), dtype=values.dtype, device=values.device)
                dense[self.positions(generator, shape.numel(), values.device)] = values
                decoded[name] = dense.view(shape)
            elif key.removesuffix(VALUES) not in names:
                decoded[key] = t
        return decoded, None
