"""Staleness functions s(τ) of asynchronous FL: how much an update computed from a model τ server
versions old still counts (Xie et al., "Asynchronous Federated Optimization", 2019, §5.2: constant,
polynomial, hinge; the FedAvg tutorial's exponential 0.9^τ). τ is the server's version when the
update arrives minus the version the client started from, never the rounds since the client last
took part (the tutorial's code measures that, which is a different quantity)."""

from collections.abc import Callable
from dataclasses import dataclass

from fedlight.core.errors import require


def constant(staleness: int, weights: "Staleness") -> float:
    return 1.0


def polynomial(staleness: int, weights: "Staleness") -> float:
    """(τ+1)^−a."""
    return (staleness + 1) ** -weights.a


def hinge(staleness: int, weights: "Staleness") -> float:
    """1 up to τ = b, then 1/(a(τ−b)+1)."""
    if staleness <= weights.b:
        return 1.0
    return 1.0 / (weights.a * (staleness - weights.b) + 1)


def exponential(staleness: int, weights: "Staleness") -> float:
    """base^τ (the FedAvg tutorial's 0.9^τ)."""
    return weights.base**staleness


FUNCTIONS: dict[str, Callable[[int, "Staleness"], float]] = {
    f.__name__: f for f in (constant, polynomial, hinge, exponential)
}


@dataclass(frozen=True)
class Staleness:
    """The weight s(τ) of an update τ versions stale: `function` with its parameters."""

    function: str = "polynomial"
    a: float = 0.5
    b: int = 4
    base: float = 0.9

    def __post_init__(self) -> None:
        require(
            self.function in FUNCTIONS,
            f"algo.staleness={self.function} is not a staleness function; use one of "
            f"{', '.join(FUNCTIONS)}",
        )
        require(self.a >= 0, f"algo.staleness_a={self.a} must be >= 0")
        require(self.b >= 0, f"algo.staleness_b={self.b} must be >= 0")
        require(0 < self.base <= 1, f"algo.staleness_base={self.base} must lie in (0, 1]")

    def __call__(self, staleness: int) -> float:
        return FUNCTIONS[self.function](staleness, self)
