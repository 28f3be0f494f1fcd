"""Gaussian attack: a malicious client sends random noise of its update's scale instead of the
update (the "Gaussian Byzantine" baseline of Blanchard et al., NeurIPS 2017, and Fang et al.,
USENIX Security 2020): each tensor's entries ~ N(0, (s · rms(Δ_t))²), rms(Δ_t) the root mean
square of the client's own update's tensor t. Drawn from (seed, ATTACK, round, client).
"""

from dataclasses import dataclass

import torch

from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.core.rng import Stream
from fedlight.core.tensors import StateDict
from fedlight.stages.attacks.base import Attack


@dataclass
class Gaussian(Attack):
    scale: float = 10.0  # s: the noise's std in units of the update's rms, per tensor

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.scale > 0, f"attack.scale={self.scale} must be > 0 (noise std / update rms)")

    def corrupt(self, ctx: RoundContext, client: int, update: StateDict) -> StateDict:
        generator = ctx.torch_generator(Stream.ATTACK, client)
        noisy: StateDict = {}
        for name, t in update.items():
            rms = t.double().square().mean().sqrt().item()
            noise = torch.randn(t.shape, generator=generator, dtype=torch.float32)
            noisy[name] = (noise * (self.scale * rms)).to(device=t.device, dtype=t.dtype)
        return noisy
