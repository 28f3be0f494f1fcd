"""`system=lognormal`: each client's compute and link slowdowns drawn independently as
exp(N(0, `sigma`²)) (median 1: half the clients faster than the base speed, half slower)."""

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fedlight.core.errors import require
from fedlight.system.base import System


@dataclass
class LogNormal(System):
    sigma: float = 1.0
    clocked: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.sigma >= 0, f"system.sigma={self.sigma} must be >= 0")

    def slowdowns(
        self, num_clients: int, generator: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        draws = np.exp(generator.normal(0.0, self.sigma, size=(2, num_clients)))
        return draws[0], draws[1]
