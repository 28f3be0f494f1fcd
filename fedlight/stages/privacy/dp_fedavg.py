"""User-level DP-FedAvg of McMahan et al., "Learning Differentially Private Recurrent Language
Models", ICLR 2018 (Algorithm 1, the fixed-denominator estimator with uniform client weights).

Each participant's whole upload (every part the server aggregates: the model update, and with
SCAFFOLD the control-variate update) is clipped to L2 norm C on the client, before compression;
integer entries (BatchNorm's `num_batches_tracked`) cannot be clipped or noised and never leave the
client (the server keeps its own). A model whose uploads carry floating-point buffers (BatchNorm's
running statistics) is refused: the noise on their deltas drives a variance negative (NaN at
z = 1), and Opacus refuses BatchNorm under DP alike (GroupNorm in its place). The server sums the
decoded uploads, each projected again to norm ≤ C (a no-op for a lossless wire; it keeps the
sensitivity at C when a compressor such as QSGD or int8 lengthens an update), adds N(0, (z·C)²)
to every entry of the sum, and divides by
the expected number of participants E = qN (not the realized one, which would leak who took part),
then the server optimizer steps. With Poisson sampling of clients at rate q = K/N
(`selection=poisson`) each round is the subsampled Gaussian mechanism that the accountant
composes; one client's data is the unit of privacy, and δ defaults to min(10⁻⁵, 0.1/N).

The server update sees only public numbers about the round (`PrivateAggregation.
public_contributors`): E participants of the mean client size (the dataset's size over N) taking
that size's local steps, never the realized participants, their sizes or steps. So SCAFFOLD's
control moves by (E/N)·(noised sum / E) = (1/N)·noised sum, and FedNova's τ_eff is the mean
client's step count: noise of the same std whoever took part. An upload that is not itself a
model update (FedNova's per-step d_i) is clipped to C over the algorithm's `upload_units` at
that step count, so that C bounds a model update with every algorithm.

Every round is noised, as Algorithm 1 does: in a round whose sum holds no upload (nobody sampled,
or every upload left out) the server update takes the noise on a zero sum over E, shaped as an
upload of the algorithm (`idle_upload`), so the model moves by noise of the same std as in any
round and the accountant's count of noised rounds is the run's.

Not covered by the guarantee, as in the paper's simulation: the training loss and counts the
loop reports (docs/configuration.md, "What a private run releases": the full list).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import torch

from fedlight.aggregation.base import Accumulator, Aggregator, Contribution, RoundAggregation
from fedlight.aggregation.mean import RunningMean
from fedlight.algorithms.base import Algorithm
from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.core.messages import ClientUpload, Contributor, Delivered, LocalResult
from fedlight.core.settings import RunSettings
from fedlight.core.tensors import StateDict
from fedlight.engines.base import num_local_steps
from fedlight.stages.base import Plan, StageSetup
from fedlight.stages.privacy.accountant import Spent, calibrate_noise, spent
from fedlight.stages.privacy.base import (
    GaussianMechanism,
    as_state,
    clip_factor,
    clipped,
    default_delta,
    gaussian_like,
    scalar,
    update_norm,
)

PUBLIC_PARTICIPANT = -1  # the client id of the stand-ins in `public_contributors`


@dataclass
class OverExpected(Aggregator):
    """Σ_i w_i u_i / E, E the expected number of participants, whatever the weights' total."""

    expected: float = 1.0

    def accumulator(self, total_weight: float, count: int) -> Accumulator:
        return RunningMean(self.expected)


def idle_upload(ctx: RoundContext, algorithm: Algorithm) -> ClientUpload:
    """The upload of a participant that took no step from the initial server state: the entries
    and shapes of every upload of the run (they never change), at the public stand-in's id."""
    federation = ctx.federation
    server = algorithm.init_server(federation.initial_weights, federation)
    received = algorithm.download(ctx, server)
    start = algorithm.start_weights(ctx, received, None)
    idle = LocalResult(PUBLIC_PARTICIPANT, start, 0, 0, 0.0, 0.0)
    return algorithm.upload(ctx, received, idle, None)[0]


def noised_buffers(ctx: RoundContext, algorithm: Algorithm) -> list[str]:
    """The model's floating-point buffers an upload carries (running statistics): the noise on
    every entry of the sum would reach them."""
    upload = idle_upload(ctx, algorithm)
    return sorted(
        {
            key
            for part in algorithm.split(ctx, upload).values()
            for key, t in part.items()
            if t.is_floating_point() and key not in ctx.trainable
        }
    )


class PrivateAggregation(RoundAggregation):
    """Every part of each accepted upload projected (all parts together) to norm ≤ `clip`, added
    with weight 1 over `expected`; `results` adds N(0, noise_std²/expected²) to every
    floating-point entry, drawn from `generator` part by part and tensor by tensor in order, so
    every worker draws the same noise, also to a sum that holds no upload (zeros shaped as
    `algorithm`'s uploads). The server update is told only `public` (samples, steps) of E
    stand-in participants."""

    def __init__(
        self,
        ctx: RoundContext,
        algorithm: Algorithm,
        sample_counts: Sequence[int],
        expected: float,
        clip: float,
        noise_std: float,
        generator: torch.Generator,
        public: tuple[int, int],
    ) -> None:
        rule = OverExpected(expected=expected)
        super().__init__(algorithm.parts, rule, rule, sample_counts)
        self.ctx, self.algorithm = ctx, algorithm
        self.expected, self.clip, self.noise_std = expected, clip, noise_std
        self.generator = generator
        self.public = public

    @property
    def public_contributors(self) -> list[Contributor]:
        """E participants of the public mean size and step count: what the means are over."""
        samples, steps = self.public
        return [Contributor(PUBLIC_PARTICIPANT, samples, steps)] * round(self.expected)

    def weights(self, contribution: Contribution) -> dict[str, float]:
        """Every part with weight 1, held jointly to norm ≤ C again."""
        parts = contribution.parts
        joint = {f"{name}/{key}": t for name, part in parts.items() for key, t in part.items()}
        factor = clip_factor(float(update_norm(joint)), self.clip)
        return dict.fromkeys(parts, factor)

    def leave_out(self, contributor: Contributor) -> None:
        """Never renormalized for: the denominator is the expected count."""

    def zero_sums(self) -> dict[str, StateDict]:
        """Each part's sum over no upload: zeros shaped as an upload's floating-point entries."""
        upload = idle_upload(self.ctx, self.algorithm)
        zeros = {k: torch.zeros_like(t) for k, t in upload.tensors.items() if t.is_floating_point()}
        return self.algorithm.split(self.ctx, replace(upload, tensors=zeros))

    def results(self) -> Mapping[str, StateDict | None]:
        """Each part's noised sum over E, the zero sum's where no upload was added."""
        std = self.noise_std / self.expected
        means = super().results()
        zeros = self.zero_sums() if any(mean is None for mean in means.values()) else {}
        return {
            name: self.with_noise(zeros[name] if mean is None else mean, std)
            for name, mean in means.items()
        }

    def with_noise(self, mean: StateDict, std: float) -> StateDict:
        if std == 0:
            return mean
        noisy: StateDict = {}
        for key, t in mean.items():
            if not t.is_floating_point():
                noisy[key] = t
                continue
            noisy[key] = t + gaussian_like(t, std, self.generator)
        return noisy


@dataclass
class DPFedAvg(GaussianMechanism):
    """`privacy=dp_fedavg`: see the module docstring; `clip` is C, the noise on the sum z·C."""

    def check_run(self, plan: Plan) -> None:
        name, choices, algorithm = self.option, plan.choices, plan.algorithm
        chosen = choices.get("selection", "random")
        require(
            plan.selection.poisson_sampling,
            f"privacy={name} accounts for Poisson sampling of clients (each takes part with "
            f"probability q = K/N), which selection={chosen} is not; use selection=poisson",
        )
        require(
            bool(algorithm.parts),
            f"privacy={name} does not apply to algo={choices.get('algo')}: it aggregates no "
            "client updates; use an algorithm that does (e.g. algo=fedavg)",
        )
        aggregator = algorithm.aggregator
        require(
            aggregator.sums_updates,
            f"privacy={name} sums the clipped updates itself; aggregator={aggregator.option} "
            "would be bypassed; leave aggregator=mean",
        )

    def asynchronous_refusal(self) -> str | None:
        return (
            "its accountant composes synchronous rounds of Poisson-sampled clients, and an "
            "asynchronous server updates from whoever arrives, for which no guarantee is derived "
            "here; use privacy=dp_sgd (example-level, accounted per client's steps) or a "
            "synchronous algorithm"
        )

    def sampling_rate(self, settings: RunSettings) -> float:
        return settings.fl.clients_per_round / settings.fl.num_clients

    def planned_delta(self, settings: RunSettings) -> float:
        """δ: `privacy.delta`, or min(10⁻⁵, 0.1/N) (`default_delta`)."""
        return default_delta(settings.fl.num_clients) if self.delta is None else self.delta

    def planned_noise(self, settings: RunSettings) -> float:
        """z: `privacy.noise_multiplier`, or calibrated so that fl.rounds rounds spend
        `privacy.target_epsilon` by the configured accountant."""
        if self.target_epsilon is None:
            assert self.noise_multiplier is not None  # one of the two is set
            return self.noise_multiplier
        return calibrate_noise(
            self.sampling_rate(settings),
            settings.fl.rounds,
            self.target_epsilon,
            self.planned_delta(settings),
            self.accountant,
        )

    def refuse_noised_buffers(self, setup: StageSetup) -> None:
        """Refuses running statistics in the uploads: noise of std z·C/E on their deltas drives
        a variance negative (BatchNorm's running_var, then NaN), which no clip prevents; Opacus
        refuses BatchNorm under DP alike and swaps in GroupNorm (`ModuleValidator.fix`)."""
        buffers = noised_buffers(setup.federation.round(0), setup.algorithm)
        named = ", ".join(buffers[:2]) + (f" and {len(buffers) - 2} more" if buffers[2:] else "")
        require(
            not buffers,
            f"privacy={self.option} adds noise to every floating-point entry of an upload, and "
            f"the model's buffers {named} (running statistics) would be noised into invalid "
            "values (negative variances, then NaN); use GroupNorm or LayerNorm in place of "
            "BatchNorm (Opacus's ModuleValidator.fix(model) makes that swap), or a model without "
            "running statistics (e.g. model=mlp or model=simple_cnn)",
        )

    def initial_state(self, setup: StageSetup) -> StateDict:
        self.refuse_noised_buffers(setup)
        settings, client_sizes = setup.settings, setup.client_sizes
        # The dataset's size is public (the data set is), a client's is not: the stand-in
        # participant holds the mean and takes its steps.
        mean_size = round(sum(client_sizes) / max(len(client_sizes), 1))
        local = settings.local
        return as_state(
            noise_multiplier=self.planned_noise(settings),
            clip=self.clip,
            delta=self.planned_delta(settings),
            sampling_rate=self.sampling_rate(settings),
            expected=float(settings.fl.clients_per_round),
            public_samples=mean_size,
            public_steps=num_local_steps(mean_size, local.epochs, local.batch_size),
        )

    def describe(self, state: StateDict) -> str | None:
        noise = scalar(state, "noise_multiplier")
        how = (
            f"calibrated for privacy.target_epsilon={self.target_epsilon}"
            if self.target_epsilon is not None
            else "privacy.noise_multiplier"
        )
        default = f" ({self.default_delta})" if self.delta is None else ""
        return (
            f"privacy={self.option}: user-level DP, q={scalar(state, 'sampling_rate'):.4g}, "
            f"{self.described_multiplier(noise, how)}, clip {scalar(state, 'clip'):.4g}, "
            f"delta={scalar(state, 'delta'):.3g}{default}, epsilon by the {self.accountant} "
            f"accountant, {self.described_noise()}"
        )

    def upload_clip(self, state: StateDict, algorithm: Algorithm) -> float:
        """C over the algorithm's `upload_units` at the public step count: the norm bound of an
        upload, C for one that is the model update."""
        return scalar(state, "clip") / algorithm.upload_units(int(state["public_steps"]))

    def clip_upload(
        self, ctx: RoundContext, state: StateDict, algorithm: Algorithm, upload: ClientUpload
    ) -> tuple[ClientUpload, dict[str, float]]:
        tensors, _ = clipped(upload.tensors, self.upload_clip(state, algorithm))
        return replace(upload, tensors=tensors), {}

    def update_noise_multiplier(self, state: StateDict) -> float:
        """z of the noise on the updates' sum."""
        return scalar(state, "noise_multiplier")

    def start_aggregation(
        self,
        ctx: RoundContext,
        state: StateDict,
        algorithm: Algorithm,
        sample_counts: Sequence[int],
    ) -> RoundAggregation:
        clip = self.upload_clip(state, algorithm)
        return PrivateAggregation(
            ctx,
            algorithm,
            sample_counts,
            expected=scalar(state, "expected"),
            clip=clip,
            noise_std=self.update_noise_multiplier(state) * clip,
            generator=self.noise_generator(ctx),
            public=(int(state["public_samples"]), int(state["public_steps"])),
        )

    def spent_after(self, state: StateDict, rounds: int) -> Spent:
        """ε(δ) after `rounds` rounds of the run's mechanism."""
        return spent(
            scalar(state, "sampling_rate"),
            scalar(state, "noise_multiplier"),
            rounds,
            scalar(state, "delta"),
            self.accountant,
        )

    def finish_round(
        self, ctx: RoundContext, state: StateDict, trained: Sequence[Delivered]
    ) -> StateDict:
        self.report(ctx, state, self.spent_after(state, ctx.round_index).epsilon)
        return state

    def budget_refusal(self, state: StateDict, round_index: int) -> str | None:
        if self.target_epsilon is None:
            return None
        reached = self.spent_after(state, round_index).epsilon
        if reached <= self.target_epsilon:
            return None
        return (
            f"round {round_index} would spend epsilon={reached:.4g} > privacy.target_epsilon="
            f"{self.target_epsilon} (delta={scalar(state, 'delta'):.3g}); the run stops after "
            f"round {round_index - 1} with its checkpoint"
        )
