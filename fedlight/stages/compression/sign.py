"""`upload=[sign]`: scaled sign compression of uploads with error feedback, EF-SignSGD
(Karimireddy et al., "Error Feedback Fixes SignSGD and other Gradient Compression Schemes",
ICML 2019, Algorithm 1), the sign compressor of signSGD (Bernstein et al., "signSGD: Compressed
Optimisation for Non-Convex Problems", ICML 2018) scaled so that its size matches the input's.

Each float32 tensor v of n entries travels as its sign bits and one scale, ‖v‖₁/n (the mean
magnitude), and is decoded as scale·sign(v_i), with sign(0) sent as +. Payload per tensor:
`<name>.scale` (float32, 4 bytes), `<name>.signs` (1 bit per entry, ⌈n/8⌉ bytes) and
`<name>.shape` (int32 dims, 4·ndim bytes): about 1/32 of float32. Deterministic; other dtypes
travel unchanged.

The scaled sign is biased, and without error feedback plain sign compression can fail to converge
(the paper's counterexamples), so `error_feedback` is on by default: the sender keeps
e ← (v + e) − decoded as per-client state and adds it to its next message.

Reported per round (metrics channel): `compression.sign.sq_error`, Σ ‖v − decoded‖² over the
round's messages (v with error feedback included).
"""

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from fedlight.stages.compression.packing import pack_bits, shape_tensor, unpack_bits
from fedlight.stages.compression.quantizer import Quantizer

PARTS = ("scale", "signs", "shape")


@dataclass
class Sign(Quantizer):
    error_feedback: bool = True

    parts: ClassVar[tuple[str, ...]] = PARTS
    metadata_parts: ClassVar[tuple[str, ...]] = ("scale", "shape")
    metric: ClassVar[str] = "compression.sign.sq_error"

    def quantize(self, t: Tensor, generator: torch.Generator) -> dict[str, Tensor]:
        """The payload parts of `t` (deterministic: `generator` is not drawn from)."""
        flat = t.detach().reshape(-1)
        scale = flat.double().abs().mean().to(torch.float32) if flat.numel() else flat.new_zeros(())
        return {
            "scale": scale,
            "signs": pack_bits((flat < 0).to(torch.int64), 1),
            "shape": shape_tensor(t),
        }

    def dequantize(self, parts: dict[str, Tensor]) -> Tensor:
        """±scale per entry in float32, the same arithmetic on both sides."""
        shape = tuple(int(d) for d in parts["shape"].tolist())
        negative = unpack_bits(parts["signs"], 1, math.prod(shape)) == 1
        scale = parts["scale"].to(torch.float32)
        return torch.where(negative, -scale, scale).reshape(shape)
