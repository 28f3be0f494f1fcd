"""TernGrad (Wen et al., "TernGrad: Ternary Gradients to Reduce Communication in Distributed Deep
Learning", NeurIPS 2017) as an upload codec of one's own (docs/howto/add-codec.md).

Each float32 tensor v travels as its scale s = max_i |v_i| and one ternary level per entry,
t_i = sign(v_i)·b_i with b_i ~ Bernoulli(|v_i| / s), and is decoded as s·t_i: unbiased,
E[s·t] = v. The levels are packed at 2 bits each, so a tensor of n entries costs ⌈n/4⌉ bytes,
plus 4 for s and 4 per dimension for its shape: about 1/16 of float32. (The paper also clips v
at 2.5 standard deviations before ternarizing; not done here.)

Reported per round (metrics channel): `compression.terngrad.sq_error`, Σ ‖v − decoded‖² over the
round's uploads.
"""

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from fedlight import Quantizer
from fedlight.stages.compression.packing import pack_bits, shape_tensor, unpack_bits

LEVEL_BITS = 2  # the levels −1, 0, 1 travel as 0, 1, 2


@dataclass
class TernGrad(Quantizer):
    error_feedback: bool = False  # unbiased: no residual needed (true keeps one per client)

    parts: ClassVar[tuple[str, ...]] = ("scale", "levels", "shape")
    metadata_parts: ClassVar[tuple[str, ...]] = ("scale", "shape")  # passed on bit for bit
    metric: ClassVar[str] = "compression.terngrad.sq_error"

    def quantize(self, t: Tensor, generator: torch.Generator) -> dict[str, Tensor]:
        """The payload parts of `t`; the uniforms come from the message's generator (seed, WIRE,
        round, client) on the CPU, then move to `t`'s device."""
        flat = t.detach().reshape(-1)
        scale = flat.abs().max() if flat.numel() else flat.new_zeros(())
        uniform = torch.rand(flat.numel(), generator=generator).to(flat.device)
        kept = uniform * scale < flat.abs()  # b_i ~ Bernoulli(|v_i| / s)
        levels = torch.sign(flat).to(torch.int64) * kept
        return {
            "scale": scale,
            "levels": pack_bits(levels + 1, LEVEL_BITS),
            "shape": shape_tensor(t),
        }

    def dequantize(self, parts: dict[str, Tensor]) -> Tensor:
        """s·t_i in float32, the same arithmetic on both sides."""
        shape = tuple(int(d) for d in parts["shape"].tolist())
        levels = unpack_bits(parts["levels"], LEVEL_BITS, math.prod(shape)) - 1
        return (levels.to(torch.float32) * parts["scale"]).reshape(shape)
