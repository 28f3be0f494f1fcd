"""The `privacy` config group: differential privacy as stages of the round.

A mechanism is an upload stage (`fedlight.stages.base`) named "privacy" that also may
replace the engine of local training. It acts at up to four points of a round, each a hook that
does nothing by default (`privacy=none`):
- `engine`: local training itself (DP-SGD's per-example clipping and noise);
- `clip_upload` (its `client_side`): after the algorithm's upload (and an attack) and before the
  wire, so compression acts on the clipped update (user-level DP-FedAvg's clipping);
- `start_aggregation`: the server side, how the decoded uploads are combined (a clipped, noised
  sum over the expected number of participants);
- `finish_round`: after the server update, the mechanism's own state (an adaptive clip norm, the
  steps each client took) and the privacy spent, `epsilon`, reported to the metrics channel.

Its state is the stage's server state (checkpointed, the same on every worker, so a resumed run
continues bit-exactly with its accountant), and its noise comes from the derived generators of
stream PRIVACY, seeded as `privacy.noise_source` says: from the config's seed (a reproducible
simulation: whoever knows the config can redraw the noise and remove it) or from 63 bits of the
operating system's entropy drawn once per run (`NOISE_SOURCES`). ε always comes from the
accountant library (`accountant.py`); summary.json's `privacy` says which accountant computed the
final ε and where the noise came from.
`budget_refusal` is asked before every round: a run with `privacy.target_epsilon` stops with a
message, its checkpoint intact, instead of running a round that would exceed the budget.
"""

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import pytorch_lightning as pl
import torch
from torch import Tensor

from fedlight.algorithms.base import Algorithm
from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.core.messages import ClientUpload
from fedlight.core.rng import Stream, derive_seed
from fedlight.core.settings import RunSettings
from fedlight.core.tensors import StateDict
from fedlight.data.base import TensorDataset
from fedlight.engines.base import Engine
from fedlight.stages.base import ClientStep, UploadStage
from fedlight.stages.privacy.accountant import ACCOUNTANTS, Spent

# Where the noise's generators are seeded from (`privacy.noise_source`), and what that means.
NOISE_SOURCES = {
    "seed": "the config's seed (a reproducible simulation: anyone with the config can redraw it)",
    "os": "the operating system's entropy, drawn once per run (not reproducible)",
}


class Privacy(UploadStage):
    """No privacy mechanism: every hook leaves the round as it is."""

    name = "privacy"

    @property
    def option(self) -> str:
        """The option's name in the `privacy` group (its module's)."""
        return type(self).__module__.rsplit(".", 1)[-1]

    def describe(self, state: StateDict) -> str | None:
        """One line stating the guarantee being run (printed at the start), or None."""
        return None

    def engine(
        self,
        module: pl.LightningModule,
        data: TensorDataset,
        settings: RunSettings,
        state: StateDict,
    ) -> Engine | None:
        """The engine of local training when the mechanism changes it (built again from the
        state a resumed run restores); None: `fl.engine`'s."""
        return None

    def clip_upload(
        self, ctx: RoundContext, state: StateDict, algorithm: Algorithm, upload: ClientUpload
    ) -> tuple[ClientUpload, dict[str, float]]:
        """The upload as the client sends it, and the numbers it reports besides (each counted
        as 4 bytes up)."""
        return upload, {}

    def client_side(
        self, step: ClientStep, upload: ClientUpload, state: StateDict | None
    ) -> tuple[ClientUpload, StateDict | None]:
        server = step.broadcast[self.name]  # the round's clip norm
        upload, reports = self.clip_upload(step.ctx, server, step.algorithm, upload)
        return upload.reporting(self.name, reports), state

    def budget_refusal(self, state: StateDict, round_index: int) -> str | None:
        """Why round `round_index` must not run (it would exceed the budget); None: it may."""
        return None

    def agree_on_noise(self, broadcast: Callable[[int], int]) -> None:
        """Takes the main worker's draws where each worker drew its own (`broadcast`: rank 0's
        value on every worker), before any noise: every worker must add the same noise."""
        return None

    def summary(self, state: StateDict, rounds: int) -> dict[str, Any]:
        """What summary.json records of the mechanism after `rounds` rounds (`privacy`)."""
        return {}


def default_delta(protected: int) -> float:
    """δ = min(10⁻⁵, 0.1/n) for a protected set of n units (clients, or examples): the chance
    that the guarantee fails for someone stays below 10% over the whole set (δ = 1/n would allow
    a mechanism that publishes one unit's data outright), and never above the usual 10⁻⁵ (Abadi
    et al. 2016 use 10⁻⁵ for MNIST's 60,000 examples; Ponomareva et al., "How to DP-fy ML",
    JAIR 2023, ask for δ ≪ 1/n)."""
    return min(1e-5, 0.1 / max(protected, 1))


@dataclass
class GaussianMechanism(Privacy):
    """The settings of a mechanism that clips to `clip` and adds Gaussian noise of multiplier z:
    z given, or calibrated for `target_epsilon` (exactly one of the two), at `delta`, with ε
    from `accountant` (see `accountant.py`)."""

    clip: float = 1.0
    noise_multiplier: float | None = 1.0  # z; null together with target_epsilon
    target_epsilon: float | None = None  # calibrate z for the planned rounds; stop at the budget
    delta: float | None = None  # δ; null: the option's default (`default_delta`)
    accountant: str = "prv"  # prv | rdp: ε's reporting, budget and calibration
    noise_source: str = "seed"  # seed | os: what the noise's generators are seeded from
    default_delta: ClassVar[str] = "min(1e-5, 0.1/N)"

    def __post_init__(self) -> None:
        require(self.clip > 0, f"privacy.clip={self.clip} must be > 0; use e.g. privacy.clip=1.0")
        require(
            (self.noise_multiplier is None) != (self.target_epsilon is None),
            f"privacy.noise_multiplier={self.noise_multiplier} and privacy.target_epsilon="
            f"{self.target_epsilon}: give exactly one (privacy.noise_multiplier=null to calibrate "
            "the noise for a target ε)",
        )
        require(
            self.noise_multiplier is None or self.noise_multiplier >= 0,
            f"privacy.noise_multiplier={self.noise_multiplier} must be >= 0",
        )
        require(
            self.target_epsilon is None or self.target_epsilon > 0,
            f"privacy.target_epsilon={self.target_epsilon} must be > 0",
        )
        require(
            self.delta is None or 0 < self.delta < 1,
            f"privacy.delta={self.delta} must lie in (0, 1); null means {self.default_delta}",
        )
        require(
            self.accountant in ACCOUNTANTS,
            f"privacy.accountant={self.accountant} is not an accountant; use "
            f"{' or '.join(ACCOUNTANTS)}",
        )
        require(
            self.noise_source in NOISE_SOURCES,
            f"privacy.noise_source={self.noise_source} is not a noise source; use seed "
            "(reproducible from the config's seed) or os (the operating system's entropy)",
        )
        # `os`: the run's noise seed; every worker takes the main worker's (`agree_on_noise`)
        self.drawn = secrets.randbits(63)

    def agree_on_noise(self, broadcast: Callable[[int], int]) -> None:
        self.drawn = broadcast(self.drawn)

    def noise_seed(self, seed: int) -> int:
        """The seed the noise's generators derive from, given the config's `seed`."""
        return {"seed": seed, "os": self.drawn}[self.noise_source]

    def noise_generator(self, ctx: RoundContext, client: int = 0) -> torch.Generator:
        """CPU torch generator of (noise seed, PRIVACY, this round, client)."""
        seed = derive_seed(self.noise_seed(ctx.seed), Stream.PRIVACY, ctx.round_index, client)
        return torch.Generator().manual_seed(seed)

    def described_noise(self) -> str:
        """The noise source, for `describe`."""
        return f"noise seeded from {NOISE_SOURCES[self.noise_source]}"

    def described_multiplier(self, noise: float, how: str) -> str:
        """The noise multiplier and where it came from (`how`), for `describe`; 0 said as what it
        is: clipping without noise, which guarantees no privacy at all (ε = ∞)."""
        if noise == 0:
            return (
                "NO NOISE (privacy.noise_multiplier=0: clipping only, no privacy guarantee, "
                "epsilon = inf)"
            )
        return f"noise multiplier {noise:.4g} ({how})"

    def spent_after(self, state: StateDict, rounds: int) -> Spent:
        """ε(δ) after `rounds` rounds, and the accountant that computed it."""
        raise NotImplementedError

    def summary(self, state: StateDict, rounds: int) -> dict[str, Any]:
        return {
            "epsilon_accountant": self.spent_after(state, rounds).accountant,
            "noise_source": self.noise_source,
        }

    def report(self, ctx: RoundContext, state: StateDict, spent: float) -> None:
        """The privacy spent after this round and the mechanism's settings, to the metrics."""
        ctx.metrics.report("epsilon", spent)
        ctx.metrics.report("privacy.delta", scalar(state, "delta"))
        ctx.metrics.report("privacy.noise_multiplier", scalar(state, "noise_multiplier"))
        ctx.metrics.report("privacy.clip", scalar(state, "clip"))


def update_norm(tensors: StateDict) -> Tensor:
    """The L2 norm of every floating-point entry of an update together, in float64."""
    norms = [
        torch.linalg.vector_norm(t, dtype=torch.float64)
        for t in tensors.values()
        if t.is_floating_point()
    ]
    return (
        torch.linalg.vector_norm(torch.stack(norms))
        if norms
        else torch.zeros((), dtype=torch.float64)
    )


def clip_factor(norm: float, clip: float) -> float:
    """min(1, clip / norm): the scale that brings an update of `norm` within `clip`."""
    return min(1.0, clip / norm) if norm > 0 else 1.0


def clipped(tensors: StateDict, clip: float) -> tuple[StateDict, float]:
    """The floating-point entries of an upload scaled together to L2 norm ≤ `clip`, and the scale
    (1: within it already). Integer entries (BatchNorm's `num_batches_tracked`) are dropped: they
    cannot be clipped or noised, so they stay on the client and the server keeps its own."""
    floating = {name: t for name, t in tensors.items() if t.is_floating_point()}
    factor = clip_factor(float(update_norm(floating)), clip)
    if factor == 1.0:
        return floating, factor
    return {name: t * factor for name, t in floating.items()}, factor


def gaussian_like(tensor: Tensor, std: float, generator: torch.Generator) -> Tensor:
    """N(0, std²) noise shaped as `tensor`, drawn in float64 from `generator` (on the CPU, so the
    draws are the same on any device) and cast to the tensor's device and dtype."""
    noise = torch.randn(tensor.shape, generator=generator, dtype=torch.float64)
    return (noise * std).to(device=tensor.device, dtype=tensor.dtype)


def scalar(state: StateDict, key: str) -> float:
    return float(state[key])


def as_state(**values: float) -> StateDict:
    """Scalars as float64 0-d tensors (how a mechanism's numbers sit in the server extras)."""
    return {key: torch.tensor(value, dtype=torch.float64) for key, value in values.items()}
