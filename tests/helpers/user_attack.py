"""A user's own attack, `attack._target_=tests.helpers.user_attack.NotFiniteUpdates`: malicious
clients send updates with NaN and Inf entries (what a diverged or broken client sends too)."""

from dataclasses import dataclass

import torch

from fedlight.core.context import RoundContext
from fedlight.core.tensors import StateDict
from fedlight.stages.attacks.base import Attack


@dataclass
class NotFiniteUpdates(Attack):
    def corrupt(self, ctx: RoundContext, client: int, update: StateDict) -> StateDict:
        corrupted = {name: t.clone() for name, t in update.items()}
        first = next(iter(corrupted.values()))
        first.view(-1)[0] = torch.nan if client % 2 else torch.inf
        return corrupted
