"""Example-level DP-SGD inside each client's local training: Abadi et al., "Deep Learning with
Differential Privacy", CCS 2016 (Algorithm 1), through Opacus.

Every local step takes a Poisson sample of the client's examples at rate q = B/n (B =
`local.batch_size`, n the client's examples; E·⌈n/B⌉ steps a round, as without privacy), Opacus
computes per-example gradients, clips each to L2 norm `clip` and adds N(0, (z·clip)²) to their sum
before the client's optimizer steps (`DPOptimizer`). The noise comes from the derived generator
(seed, PRIVACY, round, client). One example is the unit of privacy: a client's ε after s steps is
the accountant's for (q, z, s, δ); the reported ε is the largest over the clients, from the steps
each actually took, and δ defaults to min(10⁻⁵, 0.1/n) with n the examples of all clients
together (the protected set). The server aggregates as configured: the result of DP training is
post-processed.

The accountant defaults to RDP here (`privacy.accountant=prv` is offered): ε is needed for every
client's (q, steps), at each round and for the budget check, and calibration runs once per
distinct client size, so with unequal client sizes PRV's 0.3–1 s an evaluation would cost minutes
a round, while after DP-SGD's hundreds of steps RDP is only about 10% looser (q = 16/600, z = 1,
570 steps, δ = 1.7·10⁻⁶: 4.96 against PRV's 4.50).

`privacy.target_epsilon` calibrates z for a client that takes part in `privacy.rounds_per_client`
rounds (default fl.rounds: the bound that holds for any selection; with K of N clients a round
far fewer suffice, and the ε reached, from the steps each client took, shows it); a run stops
before a round in which a client could exceed the budget. Refused: a selection that chooses
clients from numbers measured on their training data without noise (`power_of_choice`,
`weighted`: a channel outside the guarantee), and `algo=central`, whose pooled trainer's sampling
rate B/(draw size) and step count change with each round's selection, so that no calibration or
budget check before a round can bound them. Not covered by the guarantee: the sample counts and
training loss a client reports (`aggregator.weighting=uniform` keeps the counts out of the model).
"""

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import pytorch_lightning as pl
import torch
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer
from opacus.validators import ModuleValidator

from fedlight.core.context import RoundContext
from fedlight.core.errors import ConfigError, require
from fedlight.core.layout import contiguous_state
from fedlight.core.messages import Delivered, LocalResult
from fedlight.core.rng import Stream, derive_seed, seed_torch
from fedlight.core.settings import RunSettings
from fedlight.core.tensors import StateDict
from fedlight.data.base import TensorDataset
from fedlight.engines.base import Engine, LocalTask, num_local_steps
from fedlight.engines.module_logs import TrainingLogs, local_metrics, logging_to
from fedlight.engines.module_optim import Optimization, configured_optimization
from fedlight.engines.sequential import SequentialEngine, training_loss
from fedlight.engines.trainer_standin import standin_of
from fedlight.stages.base import Plan, StageSetup
from fedlight.stages.privacy.accountant import Spent, calibrate_noise, spent
from fedlight.stages.privacy.base import GaussianMechanism, as_state, default_delta, scalar


class DPSGDEngine(SequentialEngine):
    """The sequential engine with Poisson-sampled batches and Opacus's DP optimizer.

    Of the module's hooks (`fedlight.engines.lightning`) it calls `configure_optimizers`,
    `training_step` (with `self.log` collected as the sequential engine's) and the lr schedulers'
    steps (each of the E·⌈n/B⌉ steps a batch, ⌈n/B⌉ of them an epoch): Opacus's optimizer owns the
    gradients, so gradient clipping besides `privacy.clip` is refused."""

    name = "dp_sgd"

    def __init__(
        self,
        module: pl.LightningModule,
        data: TensorDataset,
        settings: RunSettings,
        noise_multiplier: float,
        clip: float,
        noise_seed: int,
    ) -> None:
        super().__init__(module, data, settings)
        if self.clips:
            raise ConfigError(
                "privacy=dp_sgd clips each example's gradient to privacy.clip before the noise, "
                "and local.gradient_clip_val (or the model's configure_gradient_clipping) would "
                "clip the gradients again, which Opacus's optimizer replaces; set "
                "local.gradient_clip_val=null (and drop the override)"
            )
        errors = ModuleValidator.validate(module, strict=False)
        if errors:
            raise ConfigError(
                f"privacy=dp_sgd: the model is not Opacus-compatible ({str(errors[0]).strip()}); "
                "use a model without BatchNorm or running statistics (e.g. model=mlp or "
                "model=simple_cnn)"
            )
        self.noise_multiplier, self.clip, self.noise_seed = noise_multiplier, clip, noise_seed
        # Opacus's hooks fire on the first layer, whose input (the data) needs no gradient:
        # expected, and said by torch once per process otherwise.
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        # Hooks on the module's layers record per-example gradients (`grad_sample`), enabled
        # only while this engine trains: another engine training the same module (a personal
        # model's, fine-tuning) neither pays for them nor leaves per-example gradients behind.
        self.per_example = GradSampleModule(module, loss_reduction="mean")
        self.per_example.disable_hooks()

    def close(self) -> None:
        self.per_example.to_standard_module()

    def train_one(self, task: LocalTask, round_index: int, lrs: Sequence[float]) -> LocalResult:
        if task.callbacks:
            raise ConfigError(
                "privacy=dp_sgd trains with Opacus's optimizer, which replaces the gradients an "
                "algorithm's local corrections act on; use an algorithm without them (e.g. "
                "algo=fedavg)"
            )
        self.per_example.enable_hooks()
        try:
            return self.train_privately(task, round_index, lrs)
        finally:
            self.per_example.disable_hooks()

    def private_optimizer(
        self,
        optimization: Optimization,
        lrs: Sequence[float],
        expected_batch_size: int,
        round_index: int,
        task: LocalTask,
    ) -> DPOptimizer:
        """The module's optimizer at this round's rates, wrapped in Opacus's DP optimizer, its
        noise drawn from stream PRIVACY of (noise seed, round, client)."""
        noise = torch.Generator(task.indices.device).manual_seed(
            derive_seed(self.noise_seed, Stream.PRIVACY, round_index, task.client)
        )
        inner = optimization.optimizer
        for group, lr in zip(inner.param_groups, lrs, strict=True):
            group["lr"] = lr
        return DPOptimizer(
            inner,
            noise_multiplier=self.noise_multiplier,
            max_grad_norm=self.clip,
            expected_batch_size=expected_batch_size,
            loss_reduction="mean",
            generator=noise,
        )

    def train_privately(
        self, task: LocalTask, round_index: int, lrs: Sequence[float]
    ) -> LocalResult:
        """DP-SGD's local epochs (Abadi et al., CCS 2016, Algorithm 1 with Poisson sampling):
        Poisson-sampled batches, per-example clipping, noise on their sum."""
        module, local = self.module, self.settings.local
        module.load_state_dict(task.start)
        module.train()
        n = len(task.indices)
        rate = min(1.0, (local.batch_size or n) / n)
        seed = self.seed_of(round_index, task.client)
        generator = torch.Generator().manual_seed(seed)
        seed_torch(seed)
        losses: list[torch.Tensor] = []
        epochs = task.epochs_of(local.epochs)
        steps = num_local_steps(n, epochs, local.batch_size)
        per_epoch = steps // epochs
        logs = TrainingLogs(stepping=True)  # training_step is the only hook called
        standin = standin_of(module, local.epochs, local.batch_size)
        training = standin.local_training(n, epochs)
        with training, local_metrics(module), logging_to(module, logs):
            optimization = configured_optimization(module)
            expected = round(rate * n)
            optimizer = self.private_optimizer(optimization, lrs, expected, round_index, task)
            standin.optimizers = [optimizer]
            standin.lr_scheduler_configs = list(optimization.schedulers)
            for step in range(steps):
                epoch, batch_idx = divmod(step, per_epoch)
                standin.current_epoch = epoch
                taken = torch.rand(n, generator=generator) < rate
                optimizer.zero_grad(set_to_none=True)
                loss = self.private_batch(task, taken, batch_idx, generator, logs)
                if loss is not None:
                    losses.append(loss)
                optimizer.step()
                standin.global_step += 1
                optimization.after_step(module, batch_idx, epoch, batch_idx == per_epoch - 1)
            logged = logs.sums()
        optimizer.zero_grad(set_to_none=True)
        return LocalResult(
            client_id=task.client,
            weights=contiguous_state(module.state_dict()),
            num_samples=n,
            num_steps=steps,
            lr=lrs[0],
            train_loss=torch.stack(losses).mean().item() if losses else 0.0,
            examples=logs.examples,
            logged=logged,
        )

    def private_batch(
        self,
        task: LocalTask,
        taken: torch.Tensor,
        batch_idx: int,
        generator: torch.Generator,
        logs: TrainingLogs,
    ) -> torch.Tensor | None:
        """The loss of one Poisson-sampled batch (`taken`: each example's draw), its per-example
        gradients computed; None for an empty batch, whose step adds noise only (Opacus then
        takes empty per-example gradients)."""
        module, data = self.module, self.data
        indices = task.indices[taken.nonzero().squeeze(1).to(task.indices.device)]
        if len(indices) == 0:
            for p in module.parameters():
                if p.requires_grad:
                    p.grad_sample = torch.zeros((0, *p.shape), device=p.device, dtype=p.dtype)
            return None
        x, y = data.prepare(data.train_x[indices]), data.train_y[indices]
        if task.label_map is not None:
            y = task.label_map[y]
        if data.augment is not None:
            x = data.augment(x, generator)
        loss = training_loss(module.training_step((x, y), batch_idx))
        loss.backward()
        logs.examples += len(indices)
        logs.collect(len(indices))
        return loss.detach()


@dataclass
class DPSGD(GaussianMechanism):
    """`privacy=dp_sgd`: see the module docstring; `clip` bounds each example's gradient."""

    rounds_per_client: int | None = None  # the rounds target_epsilon is planned for; null: all
    accountant: str = "rdp"  # see the module docstring
    default_delta: ClassVar[str] = "min(1e-5, 0.1/n), n the examples of all clients"

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            self.rounds_per_client is None or self.rounds_per_client > 0,
            f"privacy.rounds_per_client={self.rounds_per_client} must be > 0; null means fl.rounds",
        )

    def check_run(self, plan: Plan) -> None:
        choices, algorithm = plan.choices, plan.algorithm
        require(
            plan.settings.fl.engine != "vectorized",
            "privacy=dp_sgd trains clients one at a time with Opacus; fl.engine=vectorized "
            "cannot run it; use fl.engine=auto",
        )
        measured = plan.selection.measures_training_data
        require(
            measured is None,
            f"privacy=dp_sgd does not cover selection={choices.get('selection')}: it chooses "
            f"clients by {measured} training data, measured without noise, outside the "
            "example-level guarantee; use selection=random or selection=poisson",
        )
        require(
            not algorithm.pools_data,
            f"privacy=dp_sgd cannot account for algo={choices.get('algo')}: its trainer's "
            "sampling rate B/(draw size) and steps change with each round's selection, so no "
            "calibration or budget check before a round can bound them; use a federated "
            "algorithm (e.g. algo=fedavg with every client a round) as the private baseline",
        )
        epochs = plan.settings.local.epochs
        require(
            plan.most_local_epochs <= epochs,
            f"privacy=dp_sgd accounts for at most local.epochs={epochs} epochs a round and "
            f"local_work={choices.get('local_work')} trains up to {plan.most_local_epochs}; keep "
            "local_work's epochs at most local.epochs (fewer are counted as E: an upper bound)",
        )

    def initial_state(self, setup: StageSetup) -> StateDict:
        settings, federation, client_sizes = setup.settings, setup.federation, setup.client_sizes
        local = settings.local
        sizes = torch.tensor(client_sizes, dtype=torch.float64)
        batch = sizes if local.batch_size is None else local.batch_size  # None: B = ∞
        rates = (batch / sizes.clamp(min=1)).clamp(max=1.0)
        per_round = torch.tensor(
            [num_local_steps(n, local.epochs, local.batch_size) for n in client_sizes]
        )
        delta = default_delta(sum(client_sizes)) if self.delta is None else self.delta
        if self.target_epsilon is None:
            assert self.noise_multiplier is not None  # one of the two is set
            noise = self.noise_multiplier
        else:
            target = self.target_epsilon
            rounds = self.rounds_per_client or federation.rounds
            noise = max(
                calibrate_noise(rate, steps * rounds, target, delta, self.accountant)
                for rate, steps in {
                    (float(r), int(s)) for r, s in zip(rates, per_round, strict=True) if s > 0
                }
            )
        return as_state(noise_multiplier=noise, clip=self.clip, delta=delta) | {
            "sampling_rates": rates,
            "steps_per_round": per_round,
            "steps": torch.zeros(federation.num_clients, dtype=torch.int64),
        }

    def describe(self, state: StateDict) -> str | None:
        how = (
            f"calibrated for privacy.target_epsilon={self.target_epsilon} over "
            f"{self.rounds_per_client or 'every'} round(s) per client"
            if self.target_epsilon is not None
            else "privacy.noise_multiplier"
        )
        default = f" ({self.default_delta})" if self.delta is None else ""
        return (
            "privacy=dp_sgd: example-level DP-SGD, "
            f"{self.described_multiplier(scalar(state, 'noise_multiplier'), how)}, clip "
            f"{self.clip:.4g} per example, delta={scalar(state, 'delta'):.3g}{default}, epsilon "
            f"by the {self.accountant} accountant, {self.described_noise()}"
        )

    def engine(
        self,
        module: pl.LightningModule,
        data: TensorDataset,
        settings: RunSettings,
        state: StateDict,
    ) -> Engine | None:
        noise = scalar(state, "noise_multiplier")
        return DPSGDEngine(module, data, settings, noise, self.clip, self.noise_seed(settings.seed))

    def largest_epsilon(self, state: StateDict, steps: torch.Tensor) -> Spent:
        """The largest ε(δ) over the clients, each after its `steps`, and its accountant."""
        noise, delta = scalar(state, "noise_multiplier"), scalar(state, "delta")
        rates = state["sampling_rates"].tolist()
        each = [
            spent(rate, noise, count, delta, self.accountant)
            for rate, count in zip(rates, steps.tolist(), strict=True)
            if count > 0
        ]
        return max(each, key=lambda one: one.epsilon, default=Spent(0.0, self.accountant))

    def spent_after(self, state: StateDict, rounds: int) -> Spent:
        """The largest client's ε(δ) after the steps each took (`rounds` is in them)."""
        return self.largest_epsilon(state, state["steps"])

    def finish_round(
        self, ctx: RoundContext, state: StateDict, trained: Sequence[Delivered]
    ) -> StateDict:
        steps = state["steps"].clone()
        for participant in trained:
            steps[participant.client] += participant.num_steps
        self.report(ctx, state, self.largest_epsilon(state, steps).epsilon)
        return state | {"steps": steps}

    def budget_refusal(self, state: StateDict, round_index: int) -> str | None:
        if self.target_epsilon is None:
            return None
        worst = self.largest_epsilon(state, state["steps"] + state["steps_per_round"]).epsilon
        if worst <= self.target_epsilon:
            return None
        return (
            f"round {round_index} could spend epsilon={worst:.4g} > privacy.target_epsilon="
            f"{self.target_epsilon} (delta={scalar(state, 'delta'):.3g}) for a client taking part "
            f"in it; the run stops after round {round_index - 1} with its checkpoint"
        )
