"""SCAFFOLD: Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for Federated
Learning", ICML 2020, Algorithm 1 with control update option II (option I by switch).

The exact variant implemented (x global model, y_i local model, c server control, c_i client
control, S the sampled clients, N the federation size, η_g the server learning rate):

- c has one tensor per trainable parameter (not buffers), kept in `ServerState.extras`, zeros at
  init, and is sent down to every sampled client (counted in bytes_down besides x).
- c_i lives in the client's persistent state. Before a client's first round it is absent and read
  as zeros; nothing is stored for clients that never trained, so storage grows only with the
  clients that actually took part (each of those keeps one model-sized control, as the paper's
  stateful clients do; in RAM, or on disk with `fl.client_state=disk`).
- Local step: after each backward pass, p.grad += c − c_i for every trainable parameter, i.e.
  y ← y − η_l (g_i(y) − c_i + c). The difference c − c_i is formed once per client and round.
  The optimizer then runs as configured, so momentum and weight decay act on the corrected gradient
  (the paper analyses plain SGD). A parameter with no gradient in a step still gets c − c_i as its
  gradient, as the update rule above says; frozen parameters (requires_grad=False) are left alone.
  The loop has no mixed precision or gradient accumulation today: a future AMP path must unscale
  the gradients before this correction (or move it to `on_before_optimizer_step`, which runs after
  unscaling), and an accumulation path must add it once per optimizer step, not once per
  micro-batch.
- Control update, option II: c_i⁺ = c_i − c + (x − y_i) / (K η_l), with K the number of local
  steps actually taken and η_l the local learning rate actually used in the round (after the
  round's schedule; the first parameter group's rate). With local momentum ρ (`algo.momentum`,
  set from `optim.momentum`) K is replaced by FedNova's ‖a‖₁ = [K − ρ(1 − ρ^K)/(1 − ρ)]/(1 − ρ),
  the number of plain-gradient steps K momentum steps amount to, so that (x − y_i)/(‖a‖₁ η_l) is
  again the average corrected gradient. Without it, (x − y_i)/(K η_l) is about 1/(1 − ρ) times too
  large and the corrections diverge (docs/tutorials/algorithms_fmnist.md). A client that took
  no step (no data) keeps its control, sends Δc_i = 0 and is left out of the server's means.
- The above is `algo.variant=fedlight` (default). Reference variants (`VARIANTS`,
  docs/configuration.md "Reference variants") set the switches below at once; an explicit switch
  wins:
  `correction=weights` applies p −= η_l (c − c_i) after each optimizer step, outside momentum and
  weight decay, as NIID-Bench's `experiments.py`, Flower's niid_bench (`ScaffoldOptimizer.
  step_custom`) and NVFlare do (sequential engine); `control_norm=steps` divides option II by
  K η_l; `control_update=option1` sets c_i⁺ = ∇f_i(x), the full-batch gradient of the client's
  loss at the x it received, from one extra pass before training (the paper's option I; the pass
  is counted in the client's examples); `update_weighting`/`control_weighting` weight Δy and Δc by
  samples instead of uniformly (NIID-Bench: Δy; Flower: both); `control_init=model` starts c at
  x₀ and a new client's c_i at the x it receives (Flower). `paper` is gradient + steps, which
  diverges under momentum and is refused there unless `algo.force=true`; `niid_bench` is weights
  + steps with Δy by samples; `flower` adds Δc by samples and control_init=model.
  `tutorial` is the SCAFFOLD tutorial's code (its §2.1–2.2; docs/results/references/) as written,
  line by line against the paper (the tutorial's names; Algorithm 1's lines 10–13 and 16–17):
  `param.data -= lr * (grad - c + gc)`, c the client's `self.control`, gc the global control: the
  paper's y ← y − η_l (g − c_i + c) (`correction=gradient`; a plain SGD step, so the preset's run
  of it has no momentum). `self.control` is built as zeros and never assigned again, so the c_i
  in that step is 0 in every round (`control_update=tutorial` never stores c_i).
  `new_delta_control = -1/(lr*epochs*len(train_loader)) * delta_model`, i.e. (x − y_i)/(K η_l),
  returned minus the never-updated zeros: Δc_i = (x − y_i)/(K η_l), where the paper's option II
  gives Δc_i = −c + (x − y_i)/(K η_l) (c_i⁺ = c_i − c + …; `control_update=tutorial`,
  `control_norm=steps`). The server's `controls.mean(dim=0)` added to the global control: c ← c +
  mean Δc_i, without the paper's |S|/N (`control_scaling=none`; the same under full
  participation); `params.mean(dim=0)` over the uploads: the uniform mean of Δy (the code
  returns that mean as the new model, and its clients never load the global model they are
  given; both read here as the paper's x ← x + mean Δy with the client starting at x, since
  neither can train as written). Since (x − y_i)/(K η_l) is the mean of g + c over the steps,
  the tutorial's c grows as c ← 2c + mean g each round: it diverges (docs/results/
  scaffold_tutorial).
- Upload: Δy_i = y_i − x for every state entry (parameters and buffers, as FedAvg) and
  Δc_i = c_i⁺ − c_i for trainable parameters; both are counted in bytes_up.
- Server: x ← x + η_g · (1/|S|) Σ_{i∈S} Δy_i for parameters, the paper's plain (unweighted) mean
  over the sampled clients, as the configured aggregator (`aggregator.weighting=algorithm` is this
  uniform mean) and server optimizer (`server_opt=sgd`, lr η_g) compute it; another aggregator or
  server optimizer replaces these two steps only. c ← c + (|S|/N) · (1/|S|) Σ_{i∈S} Δc_i, a plain
  mean by definition whatever the aggregator. With the |S|/N factor,
  c stays the mean over all N clients of c_i (absent ones counting as zero). |S| is the count the
  round's aggregation divides by (`public_contributors`): the realized participants, or under
  `privacy=dp_fedavg` the expected E, whose noised sum over E makes c move by (1/N)·(Σ Δc_i +
  noise), noise std z·C/N whoever took part. Buffers (e.g.
  BatchNorm statistics) are not optimized and are averaged exactly as FedAvg does: sample-weighted,
  without η_g, integer buffers rounded back.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import pytorch_lightning as pl
import torch
from torch import Tensor

from fedlight.aggregation.base import WEIGHTINGS, Part
from fedlight.algorithms.fedavg import BUFFERS, FedAvg
from fedlight.algorithms.fednova import momentum_step_norm
from fedlight.core.context import Federation, RoundContext
from fedlight.core.errors import require
from fedlight.core.messages import ClientUpload, LocalResult, ServerState
from fedlight.core.tensors import StateDict
from fedlight.core.variants import VariantTable, fill_from_variant
from fedlight.engines.base import LocalCallback
from fedlight.engines.sequential import training_loss

CONTROL = "control/"  # key prefix of c in ServerState.extras and of the download
DELTA_Y = "delta_y/"  # key prefixes of the two parts of an upload
DELTA_C = "delta_c/"
START_GRADIENT = "start_gradient/"  # option I's ∇f_i(x) in LocalResult.measured

VARIANTS: VariantTable = {
    "fedlight": {
        "correction": "gradient",
        "control_norm": "momentum_steps",
        "control_update": "option2",
        "update_weighting": "uniform",
        "control_weighting": "uniform",
        "control_init": "zero",
        "control_scaling": "participation",
    },
    "paper": {  # Algorithm 1 as written (also FL-bench's src/{client,server}/scaffold.py)
        "correction": "gradient",
        "control_norm": "steps",
        "control_update": "option2",
        "update_weighting": "uniform",
        "control_weighting": "uniform",
        "control_init": "zero",
        "control_scaling": "participation",
    },
    "niid_bench": {  # Li et al. 2022, NIID-Bench experiments.py
        "correction": "weights",
        "control_norm": "steps",
        "control_update": "option2",
        "update_weighting": "samples",
        "control_weighting": "uniform",
        "control_init": "zero",
        "control_scaling": "participation",
    },
    "flower": {  # Flower baselines/niid_bench (client_scaffold.py, server_scaffold.py)
        "correction": "weights",
        "control_norm": "steps",
        "control_update": "option2",
        "update_weighting": "samples",
        "control_weighting": "samples",
        "control_init": "model",
        "control_scaling": "participation",
    },
    # The SCAFFOLD tutorial's code as written (its §2.1–2.2; TUTORIAL_NOTES):
    # its stored c_i is never updated, its Δc_i lacks the paper's c_i − c, and its server adds the
    # plain mean of Δc_i to c without the |S|/N factor.
    "tutorial": {
        "correction": "gradient",
        "control_norm": "steps",
        "control_update": "tutorial",
        "update_weighting": "uniform",
        "control_weighting": "uniform",
        "control_init": "zero",
        "control_scaling": "none",
    },
}


class WeightCorrection(LocalCallback):
    """NIID-Bench's and Flower's correction: after each optimizer step, p −= η_l (c − c_i), so
    the local optimizer's momentum and weight decay never see c − c_i."""

    def __init__(self, correction: StateDict, lr: float) -> None:
        self.correction = correction
        self.lr = lr

    def on_train_batch_end(self, module: pl.LightningModule) -> None:
        with torch.no_grad():
            for name, param in module.named_parameters():
                if param.requires_grad and name in self.correction:
                    param.sub_(self.lr * self.correction[name])


class StartGradient(LocalCallback):
    """Option I's c_i⁺ = ∇f_i(x): the gradient of the client's mean training loss over all its
    examples at the weights it received, one extra pass before local training (buffers such as
    BatchNorm statistics restored after it, so training starts exactly as without it)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = names
        self.gradient: StateDict = {}

    def on_train_start(
        self, module: pl.LightningModule, batches: Iterable[tuple[Tensor, Tensor]]
    ) -> None:
        params = dict(module.named_parameters())
        buffers = {name: b.clone() for name, b in module.named_buffers()}
        sums = {name: torch.zeros_like(params[name]) for name in self.names}
        count = 0
        for x, y in batches:
            module.zero_grad(set_to_none=True)
            loss = training_loss(module.training_step((x, y), 0))
            loss.backward()
            for name, total in sums.items():
                grad = params[name].grad
                if grad is not None:
                    total.add_(grad, alpha=len(y))
            count += len(y)
        module.zero_grad(set_to_none=True)
        with torch.no_grad():
            for name, b in module.named_buffers():
                b.copy_(buffers[name])
        self.gradient = {START_GRADIENT + name: t / max(count, 1) for name, t in sums.items()}

    def measured(self) -> StateDict:
        return self.gradient


class ControlCorrection(LocalCallback):
    """Adds the precomputed c − c_i to every trainable parameter's gradient after backward (to a
    parameter without a gradient too: the update rule adds it to every step)."""

    fills_missing_gradients: ClassVar[bool] = True

    def __init__(self, correction: StateDict) -> None:
        self.correction = correction

    def correct_gradients(self, params: StateDict, grads: StateDict) -> StateDict:
        return {
            name: grad + self.correction[name] if name in self.correction else grad
            for name, grad in grads.items()
        }

    @classmethod
    def stack(cls, callbacks: Sequence["ControlCorrection"]) -> "ControlCorrection":
        names = list(callbacks[0].correction)
        return cls({name: torch.stack([c.correction[name] for c in callbacks]) for name in names})


def received_control(received: StateDict) -> StateDict:
    """c out of a client's download, keyed by parameter name."""
    return {key.removeprefix(CONTROL): t for key, t in received.items() if key.startswith(CONTROL)}


@dataclass
class Scaffold(FedAvg):
    """SCAFFOLD with option II controls; see the module docstring for the exact variant."""

    momentum: float = 0.0  # ρ of the clients' local SGD, for the option II normalization
    # fedlight | paper | niid_bench | flower: fills every switch below left None (VARIANTS)
    variant: str = "fedlight"
    # gradient: g += c − c_i before the optimizer (the paper's rule, inside momentum);
    # weights: p −= η_l (c − c_i) after each optimizer step (NIID-Bench, Flower, NVFlare)
    correction: str | None = None
    # momentum_steps: option II divides by FedNova's ‖a‖₁ η_l; steps: by K η_l (the paper's K)
    control_norm: str | None = None
    # option2: c_i⁺ from the model's movement; option1: the full local gradient at x (one pass)
    control_update: str | None = None
    update_weighting: str | None = None  # Δy's own weighting (aggregator.weighting=algorithm)
    control_weighting: str | None = None  # Δc's: uniform (paper, NIID-Bench) | samples (Flower)
    control_init: str | None = None  # zero | model: c = x₀, a new client's c_i = x (Flower)
    # participation: c += (|S|/N)·mean Δc (the paper); none: c += mean Δc (the tutorial's code)
    control_scaling: str | None = None
    force: bool = False  # run a combination known to diverge anyway

    def __post_init__(self) -> None:
        super().__post_init__()
        fill_from_variant(self, "algo.variant", VARIANTS)
        require(
            0 <= self.momentum < 1,
            f"algo.momentum={self.momentum} must be in [0, 1) (the local optim.momentum)",
        )
        require(
            self.correction in ("gradient", "weights"),
            f"algo.correction={self.correction} is not a correction; use gradient (g += c − c_i) "
            "or weights (p −= η_l (c − c_i) after each step)",
        )
        require(
            self.control_norm in ("momentum_steps", "steps"),
            f"algo.control_norm={self.control_norm} is not a normalization; use momentum_steps "
            "(FedNova's ‖a‖₁) or steps (K)",
        )
        require(
            self.control_update in ("option1", "option2", "tutorial"),
            f"algo.control_update={self.control_update} is not a control update; use option2 "
            "(from the model's movement), option1 (the full local gradient at x) or tutorial "
            "(the SCAFFOLD tutorial's code: c_i never stored, Δc_i = (x − y_i)/(K η_l))",
        )
        require(
            self.control_scaling in ("participation", "none"),
            f"algo.control_scaling={self.control_scaling} is not a scaling; use participation "
            "(c += |S|/N · mean Δc, the paper) or none (c += mean Δc, the tutorial's code)",
        )
        for key, weighting in (
            ("update_weighting", self.update_weighting),
            ("control_weighting", self.control_weighting),
        ):
            require(
                weighting in WEIGHTINGS,
                f"algo.{key}={weighting} is not a weighting; use uniform or samples",
            )
        require(
            self.control_init in ("zero", "model"),
            f"algo.control_init={self.control_init} is not an initialization; use zero or model "
            "(c = x₀ and a new client's c_i = x, as Flower's niid_bench)",
        )
        require(
            self.force
            or not (
                self.correction == "gradient" and self.control_norm == "steps" and self.momentum
            ),
            f"algo.correction=gradient with algo.control_norm=steps under local momentum "
            f"{self.momentum} diverges: the controls come out about 1/(1 − ρ) times too large "
            "and momentum amplifies them again; use control_norm=momentum_steps or "
            "correction=weights, or algo.force=true to run it anyway",
        )

    @property  # type: ignore[override]
    def parts(self) -> dict[str, Part]:  # the variant's weightings of Δy and Δc
        assert self.update_weighting is not None and self.control_weighting is not None
        return {
            DELTA_Y: Part(self.update_weighting, configurable=True),
            BUFFERS: Part("samples", configurable=False),
            DELTA_C: Part(self.control_weighting, configurable=False),
        }

    def init_server(self, weights: StateDict, federation: Federation) -> ServerState:
        """x as given and c = 0 (or x₀ with control_init=model), one tensor per trainable
        parameter, beside the server optimizer's slots."""
        server = super().init_server(weights, federation)
        control = {
            CONTROL + name: t.clone() if self.control_init == "model" else torch.zeros_like(t)
            for name, t in weights.items()
            if name in federation.trainable
        }
        return ServerState(weights, {**control, **server.extras})

    def download(self, ctx: RoundContext, server: ServerState) -> StateDict:
        """x and c travel to each sampled client."""
        controls = {key: t for key, t in server.extras.items() if key.startswith(CONTROL)}
        return {**server.weights, **controls}

    def start_weights(
        self, ctx: RoundContext, received: StateDict, client_state: StateDict | None
    ) -> StateDict:
        return {key: t for key, t in received.items() if not key.startswith(CONTROL)}

    def client_control(
        self, received: StateDict, client_state: StateDict | None
    ) -> StateDict | None:
        """c_i: the client's state; before its first round zeros (None: no tensors made), or the
        x it received with control_init=model."""
        if client_state is not None or self.control_init == "zero":
            return client_state
        return {name: received[name] for name in received_control(received)}

    def local_callbacks(
        self, ctx: RoundContext, received: StateDict, client_state: StateDict | None
    ) -> list[LocalCallback]:
        """The gradient correction c − c_i, computed once for the client's whole local run."""
        c = received_control(received)
        c_i = self.client_control(received, client_state)
        if c_i is None:  # c_i = 0: the correction is c itself (read-only, not copied)
            correction = c
        else:
            correction = {name: c[name] - c_i[name] for name in c}
        callbacks: list[LocalCallback] = [
            WeightCorrection(correction, ctx.lr)
            if self.correction == "weights"
            else ControlCorrection(correction)
        ]
        if self.control_update == "option1":
            callbacks.append(StartGradient(sorted(c)))
        return callbacks

    def upload(
        self,
        ctx: RoundContext,
        received: StateDict,
        local: LocalResult,
        client_state: StateDict | None,
    ) -> tuple[ClientUpload, StateDict | None]:
        """Δy_i and Δc_i; the new c_i⁺ = c_i + Δc_i is the client's state."""
        c = received_control(received)
        c_i = self.client_control(received, client_state)
        x = self.start_weights(ctx, received, client_state)
        # Subtraction makes new tensors: nothing of the live local.weights is kept.
        delta_y = {name: local.weights[name] - x[name] for name in x}
        if local.num_steps == 0:  # no step, no gradient information: c_i stays as it was
            delta_c = {name: torch.zeros_like(t) for name, t in c.items()}
            new_state = client_state
        elif self.control_update == "tutorial":  # Δc_i = (x − y_i)/(K η_l); c_i is never stored
            scale = local.num_steps * local.lr
            delta_c = {name: -delta_y[name] / scale for name in c}
            new_state = client_state
        else:
            if self.control_update == "option1":  # c_i⁺ = ∇f_i(x), measured before training
                gradient = {name: local.measured[START_GRADIENT + name] for name in c}
                delta_c = gradient if c_i is None else {n: gradient[n] - c_i[n] for n in c}
            else:  # Δc_i = c_i⁺ − c_i = −c + (x − y_i)/(K η_l): c_i cancels out
                steps = local.num_steps
                if self.control_norm == "momentum_steps":
                    steps = momentum_step_norm(local.num_steps, self.momentum)
                scale = steps * local.lr
                delta_c = {name: -c[name] - delta_y[name] / scale for name in c}
            if c_i is None:
                new_state = {name: d.clone() for name, d in delta_c.items()}
            else:
                new_state = {name: c_i[name] + delta_c[name] for name in c}
        tensors = {DELTA_Y + name: t for name, t in delta_y.items()}
        tensors.update({DELTA_C + name: t for name, t in delta_c.items()})
        return ClientUpload(local.client_id, local.num_samples, local.num_steps, tensors), new_state

    def model_update_keys(self, ctx: RoundContext, tensors: StateDict) -> list[str]:
        """Δy of the trainable parameters (Δc, a plain mean by definition, is left alone)."""
        return [
            key
            for key in tensors
            if key.startswith(DELTA_Y) and key.removeprefix(DELTA_Y) in ctx.trainable
        ]

    def split(self, ctx: RoundContext, upload: ClientUpload) -> dict[str, StateDict]:
        parts: dict[str, StateDict] = {DELTA_Y: {}, BUFFERS: {}, DELTA_C: {}}
        for key, t in upload.tensors.items():
            prefix, name = key[: key.index("/") + 1], key[key.index("/") + 1 :]
            if prefix == DELTA_Y:
                parts[DELTA_Y if name in ctx.trainable else BUFFERS][name] = t
            else:
                parts[DELTA_C][name] = t
        return parts

    def server_update(
        self,
        ctx: RoundContext,
        server: ServerState,
        aggregates: Mapping[str, StateDict | None],
        contributors: Sequence[tuple[int, int, int]],
    ) -> ServerState:
        """x by the server optimizer on mean Δy (buffers: FedAvg's weighted mean),
        c += (|S|/N)·mean Δc, |S| the contributors the means are over (public ones under a
        private aggregation)."""
        # A client without data took no step and sent Δy = Δc = 0: left out of the means rather
        # than diluting them. c is unaffected, since (|S|/N)·mean_S Δc = (1/N)·Σ_S Δc.
        delta_y, buffers, delta_c = aggregates[DELTA_Y], aggregates[BUFFERS], aggregates[DELTA_C]
        if delta_y is None or buffers is None or delta_c is None:
            return server
        fraction = sum(1 for _, _, steps in contributors if steps > 0) / ctx.num_clients
        if self.control_scaling == "none":
            fraction = 1.0
        moved = self.apply(server, delta_y, buffers)
        extras = dict(moved.extras)
        for name, mean in delta_c.items():
            c = server.extras[CONTROL + name]
            extras[CONTROL + name] = c + (fraction * mean).to(c.dtype)
        return ServerState(moved.weights, extras)
