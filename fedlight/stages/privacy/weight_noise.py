"""The FedAvg tutorial's §4.2 "privacy" (`add_dp_noise`), as it is written: Gaussian noise of std
`noise_std` (its sensitivity/ε = 0.01/ε) added to every weight a participant uploads, without
clipping and without an accountant. NOT differential privacy: with no bound on what one client's
weights can change, no noise scale gives an (ε, δ) guarantee (Dwork and Roth, "The Algorithmic
Foundations of Differential Privacy", 2014, §3.5: the Gaussian mechanism needs a bounded L2
sensitivity, which only clipping gives; McMahan et al., ICLR 2018, clip for that reason). So this
option reports no ε (no `epsilon` column, none in summary.json) and says so at the start of the
run and in summary.json's `privacy`. It exists to run the tutorial's table at its own setting,
beside `dp_fedavg` at the same nominal ε.

The tutorial's snippet shows no call site; it noises a state dict (`params`), which a client
holds and sends, so each participant here noises its own upload on the client, before the wire:
every entry of its model update (`Algorithm.model_update_keys`, the trainable parameters': the
same as noising the weights, the broadcast being known), scaled by the algorithm's
`upload_units` so that the model update, whatever the upload's form, carries std `noise_std`.
Buffers (BatchNorm's running statistics) are left as they are: the tutorial's CNN has none, and
noise would drive a variance negative. The noise of participant i in round r comes from the
generator of (seed, PRIVACY, r, i): the same for the same seed on any number of workers.
"""

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from fedlight.algorithms.base import Algorithm
from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.core.messages import ClientUpload, Delivered
from fedlight.core.rng import Stream
from fedlight.core.tensors import StateDict
from fedlight.stages.base import Plan
from fedlight.stages.privacy.base import Privacy, gaussian_like

NO_GUARANTEE = (
    "NO privacy guarantee (no clipping bounds a client's influence, no accountant): no epsilon "
    "is reported"
)


@dataclass
class WeightNoise(Privacy):
    """`privacy=weight_noise`: see the module docstring."""

    noise_std: float = 0.01  # σ on every uploaded weight; the tutorial's 0.01/ε

    def __post_init__(self) -> None:
        require(
            self.noise_std >= 0,
            f"privacy.noise_std={self.noise_std} must be >= 0; use e.g. 0.01 (the FedAvg "
            "tutorial's 0.01/ε at its ε = 1)",
        )

    def check_run(self, plan: Plan) -> None:
        require(
            bool(plan.algorithm.parts),
            f"privacy={self.option} noises the weights a client uploads, and "
            f"algo={plan.choices.get('algo')} uploads none; use an algorithm that aggregates "
            "client updates (e.g. algo=fedavg)",
        )

    def describe(self, state: StateDict) -> str | None:
        return (
            f"privacy={self.option}: the FedAvg tutorial's Gaussian noise of std "
            f"{self.noise_std:.4g} on each participant's uploaded weights, no clipping: "
            f"{NO_GUARANTEE}"
        )

    def clip_upload(
        self, ctx: RoundContext, state: StateDict, algorithm: Algorithm, upload: ClientUpload
    ) -> tuple[ClientUpload, dict[str, float]]:
        """The upload with N(0, σ²) on every entry of its model update (σ over the algorithm's
        `upload_units`), drawn in the upload's key order; nothing is clipped."""
        if self.noise_std == 0:
            return upload, {}
        std = self.noise_std / algorithm.upload_units(upload.num_steps)
        generator = ctx.torch_generator(Stream.PRIVACY, upload.client_id)
        tensors = dict(upload.tensors)
        for key in algorithm.model_update_keys(ctx, upload.tensors):
            tensors[key] = tensors[key] + gaussian_like(tensors[key], std, generator)
        return replace(upload, tensors=tensors), {}

    def finish_round(
        self, ctx: RoundContext, state: StateDict, trained: Sequence[Delivered]
    ) -> StateDict:
        """The noise's std as a column of every round (`privacy.noise_std`), never an ε."""
        ctx.metrics.report("privacy.noise_std", self.noise_std)
        return state

    def summary(self, state: StateDict, rounds: int) -> dict[str, Any]:
        """No ε: the mechanism has none to report."""
        return {"guarantee": NO_GUARANTEE, "noise_std": self.noise_std}
