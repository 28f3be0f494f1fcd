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
`optim.momentum`. Buffers are averaged as in FedAvg (they are not the result of gradient steps).
With equal τ_i this is FedAvg up to float rounding.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from fedlight.algorithms.base import ClientUpload, ServerState
from fedlight.algorithms.fedavg import FedAvg
from fedlight.config import require


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

    def server_update(self, server: ServerState, uploads: Sequence[ClientUpload]) -> ServerState:
        samples = [float(u.num_samples) for u in uploads]
        norms = [self.step_norm(u.num_steps) for u in uploads]
        tau_eff = sum(n * a for n, a in zip(samples, norms, strict=True)) / sum(samples)
        normalized = [
            {
                # A client that took no step has Δ_i = 0, so d_i = 0 whatever its norm.
                name: t / a if name in self.trainable and a > 0 else t
                for name, t in u.tensors.items()
            }
            for u, a in zip(uploads, norms, strict=True)
        ]
        mean = self.aggregator(normalized, samples)  # Σ p_i d_i for parameters
        step = {name: t * tau_eff if name in self.trainable else t for name, t in mean.items()}
        return ServerState(self.apply_delta(server.weights, step), server.extras)
