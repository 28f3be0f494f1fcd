"""`system=tiers`: a `fraction` of the clients (a fixed set drawn from the seed) is `slowdown`
times slower in compute and link alike (slow devices on slow networks); the rest run at the base
speeds."""

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fedlight.core.errors import require
from fedlight.system.base import System


@dataclass
class Tiers(System):
    fraction: float = 0.2
    slowdown: float = 10.0
    clocked: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        require(0 <= self.fraction <= 1, f"system.fraction={self.fraction} must lie in [0, 1]")
        require(self.slowdown > 0, f"system.slowdown={self.slowdown} must be > 0")

    def slowdowns(
        self, num_clients: int, generator: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        factors = np.ones(num_clients)
        slow = generator.permutation(num_clients)[: round(self.fraction * num_clients)]
        factors[slow] = self.slowdown
        return factors, factors.copy()
