"""Inner-product manipulation (Xie, Koyejo and Gupta, "Fall of Empires", UAI 2020): every
malicious participant sends −ε·μ, μ the mean of the round's benign updates, so that the
aggregate's inner product with the true descent direction turns negative. A small ε (0.1, the
default) hides among the benign updates and beats median and Krum; a large one (e.g. 100) beats
the mean. Omniscient: it acts after the gather, on the server side.
"""

from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor

from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.stages.attacks.base import Attack


@dataclass
class IPM(Attack):
    epsilon: float = 0.1  # ε

    after_gather: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.epsilon > 0, f"attack.epsilon={self.epsilon} must be > 0")

    def forge(self, ctx: RoundContext, benign: Tensor, num_malicious: int) -> Tensor:
        return -self.epsilon * benign.mean(dim=0)
