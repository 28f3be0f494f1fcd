"""Sign flipping: a malicious client sends −s·Δ instead of its update Δ (the "bit-flipping" /
reversed-gradient attack of e.g. Damaskinos et al., ICML 2018; Allen-Zhu et al., ICLR 2021).

With a fraction p of attackers the mean update shrinks to (1 − p − p·s)·Δ̄ in expectation: at
p = 0.2 the default s = 4 cancels it, and larger s reverses it.
"""

from dataclasses import dataclass

from fedlight.core.context import RoundContext
from fedlight.core.tensors import StateDict
from fedlight.stages.attacks.scaled import Scaled


@dataclass
class SignFlip(Scaled):
    scale: float = 4.0  # s

    def corrupt(self, ctx: RoundContext, client: int, update: StateDict) -> StateDict:
        return {name: -self.scale * t for name, t in update.items()}
