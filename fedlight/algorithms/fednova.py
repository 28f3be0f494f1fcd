"""FedNova of Wang et al., "Tackling the Objective Inconsistency Problem in Heterogeneous Federated
Optimization", NeurIPS 2020 (Section 4, normalized averaging).

Clients that take more local steps move further; FedAvg's plain average then optimizes a surrogate
objective skewed towards them. FedNova divides each client's delta by the norm of its local
accumulation vector before averaging, and rescales by the effective step count:

    d_i = Δ_i / ‖a_i‖₁,   τ_eff = Σ_i p_i ‖a_i‖₁,   x ← x + η_g τ_eff Σ_i p_i d_i,   p_i = n_i / Σ n

Variant implemented: local SGD with heavy-ball momentum ρ (PyTorch's SGD without dampening or
Nesterov), for which ‖a_i‖₁ = [τ_i − ρ(1 − ρ^τ_i)/(1 − ρ)] / (1 − ρ), which is τ_i for plain
SGD (ρ = 0). τ_i is the number of optimizer steps the client took this round, so clients with
more data take more steps. ρ must match the local optimizer: the YAML takes it from
`optim.momentum`. The client normalizes and the server rescales after aggregating, so d_i goes
through the configured aggregator and τ_eff Σ p_i d_i through the server optimizer (p_i follow
the aggregator's weighting; the paper's are the sample shares). Buffers are averaged as in FedAvg
(they are not the result of gradient steps). With equal τ_i this is FedAvg up to float rounding.

The upload is d_i (and the buffers' deltas), so what a client sends, and what a compressor, an
attack or a privacy mechanism acts on, is the normalized update. Under a private aggregation
(`privacy=dp_fedavg`) τ_eff is that of the aggregation's public stand-in participants (‖a‖₁ of
the mean client's step count, `public_contributors`), so the server update never sees a
participant's size or steps, and the mechanism clips d_i to C/τ_eff (`upload_units`): the clip
bounds τ_eff·d_i, a model update, as it bounds FedAvg's Δ_i, and the noise on the step is z·C/E,
FedAvg's, whoever took part.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fedlight.aggregation.base import client_weight
from fedlight.algorithms.fedavg import BUFFERS, UPDATE, FedAvg
from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.core.messages import ClientUpload, LocalResult, ServerState
from fedlight.core.tensors import StateDict, subtract


def momentum_step_norm(num_steps: int, momentum: float) -> float:
    """‖a‖₁ = [τ − ρ(1 − ρ^τ)/(1 − ρ)]/(1 − ρ): how many plain-gradient steps τ local steps of
    heavy-ball SGD with momentum ρ amount to (τ when ρ = 0); Wang et al. 2020, Section 4."""
    rho = momentum
    return (num_steps - rho * (1 - rho**num_steps) / (1 - rho)) / (1 - rho)


@dataclass
class FedNova(FedAvg):
    momentum: float = 0.0  # ρ of the clients' local SGD

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            0 <= self.momentum < 1,
            f"algo.momentum={self.momentum} must be in [0, 1) (the local optim.momentum)",
        )

    def step_norm(self, num_steps: int) -> float:
        return momentum_step_norm(num_steps, self.momentum)

    def upload_units(self, steps: int) -> float:
        """‖a‖₁ of `steps` steps: d_i times it is a model update (1 for a client without steps)."""
        return self.step_norm(steps) if steps > 0 else 1.0

    def upload(
        self,
        ctx: RoundContext,
        received: StateDict,
        local: LocalResult,
        client_state: StateDict | None,
    ) -> tuple[ClientUpload, StateDict | None]:
        """d_i = Δ_i / ‖a_i‖₁ for the parameters (a client that took no step has Δ_i = 0, so
        d_i = 0 whatever its norm); buffers' deltas as they are."""
        delta = subtract(local.weights, received)
        norm = self.step_norm(local.num_steps)
        if norm > 0:
            delta = {name: t / norm if name in ctx.trainable else t for name, t in delta.items()}
        return ClientUpload(local.client_id, local.num_samples, local.num_steps, delta), None

    def server_update(
        self,
        ctx: RoundContext,
        server: ServerState,
        aggregates: Mapping[str, StateDict | None],
        contributors: Sequence[tuple[int, int, int]],
    ) -> ServerState:
        """x moves by τ_eff Σ p_i d_i, τ_eff = Σ p_i ‖a_i‖₁."""
        mean, buffers = aggregates[UPDATE], aggregates[BUFFERS]
        if mean is None or buffers is None:
            return server
        weighting = self.aggregator.weighting_of(self.parts[UPDATE])
        weights = [client_weight(weighting, samples) for _, samples, _ in contributors]
        norms = [self.step_norm(steps) for _, _, steps in contributors]
        tau_eff = sum(p * a for p, a in zip(weights, norms, strict=True)) / sum(weights)
        return self.apply(server, {name: t * tau_eff for name, t in mean.items()}, buffers)
