"""What the per-tensor quantizers (`qsgd`, `int8`) share: each float32 tensor becomes named payload
parts and back, with optional error feedback and the round's squared error reported.

A subclass writes `quantize` (the parts of one tensor, drawing any randomness from the message's
generator: stream WIRE, the round, the client) and `dequantize` (the same arithmetic on both sides,
so error feedback's residual, `LossyTransform`, is exactly what the receiver lost). Every part but
the coded values is metadata (`metadata_parts`: norms, scales, zero points, shapes), which later
transforms of the chain pass bit for bit (`fedlight.stages.wire.base.Payload`). Other dtypes, and
metadata from before in the chain, travel unchanged under their own names."""

from abc import abstractmethod
from typing import ClassVar

import torch
from torch import Tensor

from fedlight.core.context import RoundContext
from fedlight.core.rng import Stream
from fedlight.core.tensors import StateDict
from fedlight.stages.compression.packing import add_parts, decode_parts, put
from fedlight.stages.wire.base import LossyTransform, Payload


class Quantizer(LossyTransform):
    parts: ClassVar[tuple[str, ...]]  # the payload parts of one tensor, "<name>.<part>"
    metadata_parts: ClassVar[tuple[str, ...]]  # those of them that are not coded values
    metric: ClassVar[str]  # the round's summed squared quantization error, in the metrics channel

    @abstractmethod
    def quantize(self, t: Tensor, generator: torch.Generator) -> dict[str, Tensor]:
        """The payload parts of the float32 tensor `t`."""

    @abstractmethod
    def dequantize(self, parts: dict[str, Tensor]) -> Tensor:
        """The float32 tensor the parts stand for."""

    def encode_values(self, ctx: RoundContext, client: int, tensors: Payload) -> Payload:
        generator = ctx.torch_generator(Stream.WIRE, client)
        payload: StateDict = {}
        metadata = set(tensors.metadata)
        squared_error = 0.0
        for name, t in tensors.items():
            if not self.compresses(name, t, tensors):
                put(payload, name, t)
                continue
            parts = self.quantize(t, generator)
            add_parts(payload, name, parts)
            metadata.update(f"{name}.{part}" for part in self.metadata_parts)
            residual = t - self.dequantize(parts)
            squared_error += float(residual.double().square().sum())
        ctx.metrics.add(self.metric, squared_error)
        return Payload(payload, metadata)

    def decode(
        self, ctx: RoundContext, client: int, payload: StateDict, state: StateDict | None
    ) -> tuple[StateDict, StateDict | None]:
        def dequantized(name: str) -> Tensor:
            return self.dequantize({part: payload[f"{name}.{part}"] for part in self.parts})

        return decode_parts(payload, self.parts, dequantized), None
