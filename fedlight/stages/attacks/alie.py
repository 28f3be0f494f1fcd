"""ALIE, "A Little Is Enough" (Baruch et al., NeurIPS 2019): every malicious participant sends
μ − z·σ, μ and σ the coordinate-wise mean and standard deviation of the round's benign updates.
The shift stays within the benign spread, so median, trimmed mean and Krum keep it. With n
participants of which m are malicious, the paper's z is Φ⁻¹((n − s)/n), s = ⌊n/2 + 1⌋ − m, the
largest shift that still has a majority of updates farther from the mean (`attack.z: null`), or a
fixed `attack.z`. An omniscient attack: it acts after the gather, on the server side.
"""

from dataclasses import dataclass
from statistics import NormalDist
from typing import ClassVar

import torch
from torch import Tensor

from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.stages.attacks.base import Attack


def paper_z(participants: int, malicious: int) -> float:
    """Baruch et al.'s z_max for n participants, m of them malicious."""
    supporters = participants // 2 + 1 - malicious
    quantile = (participants - supporters) / participants
    return NormalDist().inv_cdf(min(max(quantile, 1e-6), 1 - 1e-6))


@dataclass
class ALIE(Attack):
    z: float | None = None  # None: the paper's z_max for the round's n and m

    after_gather: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.z is None or self.z >= 0, f"attack.z={self.z} must be ≥ 0 (or null)")

    def forge(self, ctx: RoundContext, benign: Tensor, num_malicious: int) -> Tensor:
        participants = len(benign) + num_malicious
        z = paper_z(participants, num_malicious) if self.z is None else self.z
        std = benign.std(dim=0, correction=1) if len(benign) > 1 else torch.zeros_like(benign[0])
        return benign.mean(dim=0) - z * std
