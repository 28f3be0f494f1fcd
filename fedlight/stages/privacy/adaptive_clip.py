"""DP-FedAvg with adaptive clipping of Andrew et al., "Differentially Private Learning with
Adaptive Clipping", NeurIPS 2021 (Algorithm 1 with the geometric update, Theorem 1's noise split).

The clip norm C follows the γ-quantile of the participants' update norms: each client also sends
b_i = 1[‖Δ_i‖ ≤ C]; the server forms the noisy fraction
b̄ = (Σ_i (b_i − ½) + N(0, σ_b²)) / E + ½ (E the expected participants) and sets
C ← C·exp(−η_C (b̄ − γ)). Both releases are Gaussian mechanisms on the same clients; Theorem 1 makes
their composition one Gaussian mechanism of multiplier z (the one the accountant sees) when the
updates' sum gets multiplier z_Δ = (z⁻² − (2σ_b)⁻²)^(−1/2), which needs z < 2σ_b. The paper's
defaults: γ = ½, η_C = 0.2, σ_b = E/20, C₀ = 0.1. Its σ_b = E/20 is meant for E in the hundreds:
at E = 10 (σ_b = ½) it leaves nothing for the updates at z = 1. So σ_b defaults to max(E/20, z),
the paper's value wherever that is larger, else z, for which z_Δ = z/√(3/4) ≈ 1.155·z. The noised
fraction b̄ is the only count of clipped updates this mechanism releases
(`privacy.unclipped_fraction`).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from fedlight.algorithms.base import Algorithm
from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.core.messages import ClientUpload, Delivered
from fedlight.core.rng import Stream, numpy_generator
from fedlight.core.settings import RunSettings
from fedlight.core.tensors import StateDict
from fedlight.stages.base import Plan, StageSetup
from fedlight.stages.privacy.base import as_state, clipped, scalar
from fedlight.stages.privacy.dp_fedavg import DPFedAvg

UNCLIPPED = "unclipped"  # b_i, what a client reports besides its update
COUNT_NOISE_SUBSTREAM = 1  # the count's noise: stream PRIVACY, this round, "client" 1


@dataclass
class AdaptiveClip(DPFedAvg):
    """`privacy=adaptive_clip`: see the module docstring; `clip` is the initial C₀."""

    clip: float = 0.1
    target_quantile: float = 0.5  # γ
    clip_lr: float = 0.2  # η_C
    count_noise: float | None = None  # σ_b; null: max(E/20, z)

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            0 < self.target_quantile < 1,
            f"privacy.target_quantile={self.target_quantile} must lie in (0, 1); use e.g. 0.5",
        )
        require(self.clip_lr > 0, f"privacy.clip_lr={self.clip_lr} must be > 0; use e.g. 0.2")
        require(
            self.count_noise is None or self.count_noise > 0,
            f"privacy.count_noise={self.count_noise} must be > 0; null means max(E/20, z)",
        )

    def planned_count_noise(self, settings: RunSettings, noise: float) -> float:
        """σ_b: `privacy.count_noise`, or max(E/20, z) for the run's z = `noise`."""
        if self.count_noise is not None:
            return self.count_noise
        return max(settings.fl.clients_per_round / 20, noise)

    def check_run(self, plan: Plan) -> None:
        super().check_run(plan)
        noise = self.planned_noise(plan.settings)
        count_noise = self.planned_count_noise(plan.settings, noise)
        require(
            noise < 2 * count_noise,
            f"privacy.noise_multiplier={noise:.4g} must be below 2·σ_b={2 * count_noise:.4g} to "
            "leave noise for the updates (Andrew et al. 2021, Theorem 1); raise "
            "privacy.count_noise (null: max(E/20, z)), or use privacy=dp_fedavg",
        )

    def initial_state(self, setup: StageSetup) -> StateDict:
        settings = setup.settings
        state = super().initial_state(setup)
        noise = scalar(state, "noise_multiplier")
        return state | as_state(count_noise=self.planned_count_noise(settings, noise))

    def describe(self, state: StateDict) -> str | None:
        fixed = super().describe(state)
        return (
            f"{fixed}; adaptive: quantile {self.target_quantile}, clip_lr {self.clip_lr}, count "
            f"noise {scalar(state, 'count_noise'):.4g}, update noise multiplier "
            f"{self.update_noise_multiplier(state):.4g}"
        )

    def update_noise_multiplier(self, state: StateDict) -> float:
        noise = scalar(state, "noise_multiplier")
        if noise == 0:
            return 0.0
        return (noise**-2 - (2 * scalar(state, "count_noise")) ** -2) ** -0.5

    def clip_upload(
        self, ctx: RoundContext, state: StateDict, algorithm: Algorithm, upload: ClientUpload
    ) -> tuple[ClientUpload, dict[str, float]]:
        tensors, factor = clipped(upload.tensors, self.upload_clip(state, algorithm))
        return replace(upload, tensors=tensors), {UNCLIPPED: float(factor == 1.0)}

    def finish_round(
        self, ctx: RoundContext, state: StateDict, trained: Sequence[Delivered]
    ) -> StateDict:
        state = super().finish_round(ctx, state, trained)
        expected = scalar(state, "expected")
        centered = sum(t.reports[UNCLIPPED] - 0.5 for t in trained if t.accepted)
        generator = numpy_generator(
            self.noise_seed(ctx.seed), Stream.PRIVACY, ctx.round_index, COUNT_NOISE_SUBSTREAM
        )
        noise = scalar(state, "count_noise") * float(generator.standard_normal())
        fraction = (centered + noise) / expected + 0.5
        ctx.metrics.report("privacy.unclipped_fraction", fraction)
        clip = scalar(state, "clip") * math.exp(-self.clip_lr * (fraction - self.target_quantile))
        return state | as_state(clip=clip)
