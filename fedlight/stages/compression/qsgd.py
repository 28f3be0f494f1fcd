"""`upload=[qsgd]`: QSGD stochastic quantization of uploads (Alistarh et al., "QSGD:
Communication-Efficient SGD via Gradient Quantization and Encoding", NeurIPS 2017).

Each float32 tensor is flattened and cut into buckets of `bucket_size` consecutive entries (the
last may be shorter; 0: one bucket per tensor), and each bucket v is quantized to s = 2^bits − 1
levels: ξ_i = ⌊s·|v_i|/‖v‖₂ + u_i⌋ with u_i ~ U[0, 1) from the round context's generator (stream
WIRE, the round, the client), decoded as ‖v‖₂·sign(v_i)·ξ_i/s, so E[decoded] = v (the paper's
Lemma 3.1), with E‖decoded − v‖² ≤ min(d/s², √d/s)·‖v‖² for a bucket of d entries. Buckets are
the paper's ("bucket size d"), and the default 512 the size of its 4-bit experiments: one norm for
a whole tensor makes the variance grow with √n (a 200×200 tensor at 4 bits: 9.6·‖v‖², against
0.38·‖v‖² in buckets of 512, whose bound is 1.51). The levels travel at a fixed `bits` bits per
entry instead of the paper's Elias coding, so the bytes do not depend on the values: `<name>.norm`
(float32 per bucket, 4·b bytes for b buckets), `<name>.signs` (1 bit per entry, ⌈n/8⌉ bytes),
`<name>.levels` (⌈n·bits/8⌉ bytes) and `<name>.shape` (int32 dims, 4·ndim bytes). Decoding is
deterministic from the payload and `bucket_size`; other dtypes travel unchanged.

With `error_feedback` the sender keeps e ← (v + e) − decoded as per-client state and adds it to
its next message (Karimireddy et al., "Error Feedback Fixes SignSGD", ICML 2019), as `Cast` does.

Reported per round (metrics channel): `compression.qsgd.sq_error`, Σ ‖v − decoded‖² over the
round's messages (v with error feedback included).
"""

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from fedlight.core.errors import require
from fedlight.stages.compression.packing import (
    pack_bits,
    shape_tensor,
    unpack_bits,
)
from fedlight.stages.compression.quantizer import Quantizer

PARTS = ("norm", "signs", "levels", "shape")


@dataclass
class QSGD(Quantizer):
    bits: int = 4
    bucket_size: int = 512
    error_feedback: bool = False

    parts: ClassVar[tuple[str, ...]] = PARTS
    metadata_parts: ClassVar[tuple[str, ...]] = ("norm", "shape")
    metric: ClassVar[str] = "compression.qsgd.sq_error"
    # What runs did before `bucket_size` existed: one bucket per tensor (see
    # `fedlight.runs.experiment`).
    settings_before: ClassVar[dict[str, Any]] = {"bucket_size": 0}

    def __post_init__(self) -> None:
        require(1 <= self.bits <= 8, f"compression.bits must be between 1 and 8, got {self.bits}")
        require(
            self.bucket_size >= 0,
            f"compression.bucket_size must be ≥ 0 (0: one bucket per tensor), got "
            f"{self.bucket_size}",
        )

    @property
    def levels(self) -> int:
        """s, the number of nonzero quantization levels."""
        return (1 << self.bits) - 1

    def bucket_of(self, count: int, device: torch.device) -> Tensor:
        """The bucket of each of `count` entries."""
        return torch.arange(count, device=device) // (self.bucket_size or max(count, 1))

    def quantize(self, t: Tensor, generator: torch.Generator) -> dict[str, Tensor]:
        """The payload parts of `t`; the uniforms are drawn on the CPU generator, then moved."""
        flat = t.detach().reshape(-1)
        count = flat.numel()
        size = self.bucket_size or max(count, 1)
        buckets = max(-(-count // size), 1)
        # Zeros pad the last bucket, which leaves its norm.
        padded = torch.cat([flat, flat.new_zeros(buckets * size - count)]).view(buckets, size)
        norm = padded.double().norm(dim=1).to(torch.float32)
        # Scaled by the float32 norm that travels, so the decoded value is unbiased for it (a zero
        # norm's bucket holds zeros only: 0/1); the clamp keeps ξ ≤ s where rounding the norm to
        # float32 made |v_i|/‖v‖ exceed 1.
        safe = torch.where(norm > 0, norm, torch.ones_like(norm)).double()
        scaled = self.levels * flat.abs().double() / safe[self.bucket_of(count, flat.device)]
        uniform = torch.rand(count, generator=generator, dtype=torch.float64)
        xi = torch.floor(scaled + uniform.to(flat.device)).clamp(0, self.levels)
        return {
            "norm": norm,
            "signs": pack_bits((flat < 0).to(torch.int64), 1),
            "levels": pack_bits(xi.to(torch.int64), self.bits),
            "shape": shape_tensor(t),
        }

    def dequantize(self, parts: dict[str, Tensor]) -> Tensor:
        """‖v‖·sign·ξ/s in float32 per bucket, the same arithmetic on both sides."""
        shape = tuple(int(d) for d in parts["shape"].tolist())
        count = math.prod(shape)
        signs = unpack_bits(parts["signs"], 1, count)
        xi = unpack_bits(parts["levels"], self.bits, count).to(torch.float32)
        norm = parts["norm"].to(torch.float32).reshape(-1)[self.bucket_of(count, xi.device)]
        magnitude = norm * xi / self.levels
        return torch.where(signs == 1, -magnitude, magnitude).reshape(shape)
