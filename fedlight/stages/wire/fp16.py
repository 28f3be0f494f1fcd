"""`upload=[fp16]`, `download=[fp16]`: tensors travel as IEEE half precision (see
`fedlight.stages.wire.cast`)."""

from dataclasses import dataclass
from typing import ClassVar

import torch

from fedlight.stages.wire.cast import Cast


@dataclass
class FP16(Cast):
    dtype: ClassVar[torch.dtype] = torch.float16
