"""Server optimizers: Reddi et al., "Adaptive Federated Optimization", ICLR 2021 (Algorithm 2).

The server treats FedAvg's sample-weighted mean delta Δ_t as a pseudo-gradient and hands it to an
optimizer instead of adding it (FedAvg is server SGD with η = 1). Each optimizer keeps per-parameter
slots (momentum m, second moment v) in `ServerState.extras` under "<slot>/<parameter name>", so
checkpoints carry them and a resumed run continues bit-exactly. Buffers (e.g. BatchNorm statistics)
are not optimized: they take the plain mean delta, as in FedAvg.
"""

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from fedlight.algorithms.base import ClientUpload, ServerState
from fedlight.algorithms.fedavg import FedAvg
from fedlight.config import require
from fedlight.tensors import StateDict

Slots = dict[str, Tensor]  # one parameter's optimizer state: slot name → tensor


@dataclass
class ServerOptimizer(FedAvg):
    """FedAvg whose parameter update is x ← x + η · direction(Δ, slots) instead of x + η Δ."""

    slots: ClassVar[tuple[str, ...]] = ()

    def init_server(
        self, weights: StateDict, trainable: frozenset[str], num_clients: int
    ) -> ServerState:
        server = super().init_server(weights, trainable, num_clients)
        extras = dict(server.extras)
        for name, param in weights.items():
            if name in trainable:
                for slot in self.slots:
                    extras[f"{slot}/{name}"] = self.initial_slot(slot, param)
        return ServerState(server.weights, extras)

    def initial_slot(self, slot: str, param: Tensor) -> Tensor:
        """Round-0 value of an optimizer slot; zero unless the method says otherwise."""
        return torch.zeros_like(param)

    @abstractmethod
    def direction(self, delta: Tensor, state: Slots) -> tuple[Tensor, Slots]:
        """The step before η for one parameter, and its new slots, from Δ and the old slots."""

    def server_update(self, server: ServerState, uploads: Sequence[ClientUpload]) -> ServerState:
        mean_delta = self.mean_delta(uploads)
        step = dict(mean_delta)
        extras = dict(server.extras)
        for name, param in server.weights.items():
            if name not in self.trainable:
                continue
            state: Slots = {slot: server.extras[f"{slot}/{name}"] for slot in self.slots}
            step[name], new_state = self.direction(mean_delta[name].to(param.dtype), state)
            extras.update({f"{slot}/{name}": value for slot, value in new_state.items()})
        return ServerState(self.apply_delta(server.weights, step), extras)


@dataclass
class AdaptiveServerOptimizer(ServerOptimizer):
    """Algorithm 2's common part: m_t = β1 m + (1 − β1) Δ;  x ← x + η m_t / (√v_t + τ).

    No bias correction (as in the paper); v starts at τ² (the paper asks v_{-1} ≥ τ²), m at 0.
    Subclasses give the second-moment rule v_t = f(v_{t-1}, Δ²).
    """

    server_lr: float = 0.01
    beta1: float = 0.9
    tau: float = 1e-3

    slots: ClassVar[tuple[str, ...]] = ("m", "v")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(0 <= self.beta1 < 1, f"algo.beta1={self.beta1} must be in [0, 1)")
        require(self.tau > 0, f"algo.tau={self.tau} must be > 0 (e.g. 1e-3)")

    def initial_slot(self, slot: str, param: Tensor) -> Tensor:
        return torch.full_like(param, self.tau**2) if slot == "v" else torch.zeros_like(param)

    @abstractmethod
    def second_moment(self, v: Tensor, delta_sq: Tensor) -> Tensor:
        """v_t from v_{t-1} and Δ_t²."""

    def direction(self, delta: Tensor, state: Slots) -> tuple[Tensor, Slots]:
        m = self.beta1 * state["m"] + (1 - self.beta1) * delta
        v = self.second_moment(state["v"], delta * delta)
        return m / (v.sqrt() + self.tau), {"m": m, "v": v}


def require_beta2(beta2: float) -> None:
    require(0 <= beta2 < 1, f"algo.beta2={beta2} must be in [0, 1)")
