"""`system=uniform`: each client's compute and link slowdowns drawn independently from
U(`low`, `high`)."""

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fedlight.core.errors import require
from fedlight.system.base import System


@dataclass
class Uniform(System):
    low: float = 1.0
    high: float = 10.0
    clocked: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            0 < self.low <= self.high,
            f"system.low={self.low} and system.high={self.high} need 0 < low <= high",
        )

    def slowdowns(
        self, num_clients: int, generator: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        draws = generator.uniform(self.low, self.high, size=(2, num_clients))
        return draws[0], draws[1]
