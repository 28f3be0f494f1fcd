"""`upload=[bf16]`, `download=[bf16]`: tensors travel as bfloat16, float32's range with 8 bits
of mantissa (see `fedlight.stages.wire.cast`)."""

from dataclasses import dataclass
from typing import ClassVar

import torch

from fedlight.stages.wire.cast import Cast


@dataclass
class BF16(Cast):
    dtype: ClassVar[torch.dtype] = torch.bfloat16
