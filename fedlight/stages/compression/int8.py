"""`upload=[int8]`, `download=[int8]`: per-block affine quantization to 8-bit integers, round to
nearest (the asymmetric min/max scheme of Jacob et al., "Quantization and Training of Neural
Networks for Efficient Integer-Arithmetic-Only Inference", CVPR 2018, here with a float32 zero
point).

Each float32 tensor is flattened and cut into blocks of `block_size` entries (0: one block per
tensor; the last block may be shorter; the receiver cuts by the same setting). A block with
minimum m and maximum M gets scale σ = (M − m)/255 and zero point z = m; entry v travels as
q = round((v − z)/σ) ∈ [0, 255] and is decoded as q·σ + z, off by at most σ/2. A constant block
has σ = 0, q = 0 and decodes exactly to z. Deterministic: no randomness. Payload per tensor of n
entries in b blocks: `<name>.q` (uint8, n bytes), `<name>.scale` and `<name>.zero` (float32 per
block, 4·b bytes each) and `<name>.shape` (int32 dims, 4·ndim bytes); other dtypes travel
unchanged.

With `error_feedback` the sender keeps e ← (v + e) − decoded as per-client state and adds it to
its next message (Karimireddy et al., "Error Feedback Fixes SignSGD", ICML 2019), as `Cast` does.

Reported per round (metrics channel): `compression.int8.sq_error`, Σ ‖v − decoded‖² over the
round's messages (v with error feedback included).
"""

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from fedlight.core.errors import require
from fedlight.stages.compression.packing import shape_tensor
from fedlight.stages.compression.quantizer import Quantizer

PARTS = ("q", "scale", "zero", "shape")
LEVELS = 255


@dataclass
class Int8(Quantizer):
    block_size: int = 0
    error_feedback: bool = False

    parts: ClassVar[tuple[str, ...]] = PARTS
    metadata_parts: ClassVar[tuple[str, ...]] = ("scale", "zero", "shape")
    metric: ClassVar[str] = "compression.int8.sq_error"

    def __post_init__(self) -> None:
        require(self.block_size >= 0, f"compression.block_size must be ≥ 0, got {self.block_size}")

    def quantize(self, t: Tensor, generator: torch.Generator) -> dict[str, Tensor]:
        """The payload parts of `t` (deterministic: `generator` is not drawn from)."""
        flat = t.detach().reshape(-1)
        count = flat.numel()
        block = self.block_size or max(count, 1)
        blocks = -(-count // block)
        # The last block is padded with its own last entry, which leaves its minimum and maximum.
        padded = torch.cat([flat, flat[-1:].expand(blocks * block - count)]).view(blocks, block)
        zero = padded.amin(dim=1) if blocks else flat.new_zeros(0)
        scale = (padded.amax(dim=1) - zero) / LEVELS if blocks else flat.new_zeros(0)
        safe = torch.where(scale > 0, scale, torch.ones_like(scale))
        q = torch.round((padded - zero[:, None]) / safe[:, None]).clamp(0, LEVELS)
        q = torch.where(scale[:, None] > 0, q, torch.zeros_like(q))
        return {
            "q": q.reshape(-1)[:count].to(torch.uint8),
            "scale": scale,
            "zero": zero,
            "shape": shape_tensor(t),
        }

    def dequantize(self, parts: dict[str, Tensor]) -> Tensor:
        """q·σ + z per block in float32, the same arithmetic on both sides."""
        shape = tuple(int(d) for d in parts["shape"].tolist())
        q = parts["q"].to(torch.float32)
        which = torch.arange(q.numel(), device=q.device) // (self.block_size or max(q.numel(), 1))
        return (q * parts["scale"][which] + parts["zero"][which]).reshape(shape)
