"""Boosted updates: a malicious client sends s·Δ, the scaling of model replacement (Bagdasaryan
et al., AISTATS 2020, with s ≈ n/η so that its model replaces the global one under the mean).
Alone it amplifies a client's own (honest) update; what it breaks is any aggregator that trusts
update norms.
"""

from dataclasses import dataclass

from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.core.tensors import StateDict
from fedlight.stages.attacks.base import Attack


@dataclass
class Scaled(Attack):
    scale: float = 10.0  # s

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.scale > 0, f"attack.scale={self.scale} must be > 0 (the factor s)")

    def corrupt(self, ctx: RoundContext, client: int, update: StateDict) -> StateDict:
        return {name: self.scale * t for name, t in update.items()}
