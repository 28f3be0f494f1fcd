"""The server optimizer of Reddi et al., "Adaptive Federated Optimization", ICLR 2021 (Algorithm 2).

The server treats an algorithm's aggregated update Δ_t (FedAvg: the mean client delta) as a
pseudo-gradient and moves the global model by x ← x + η · direction(Δ_t, slots) for each trainable
parameter; FedAvg is `sgd` with η = 1. Each optimizer keeps per-parameter slots (momentum m, second
moment v) in `ServerState.extras` under "<slot>/<parameter name>", so checkpoints carry them and a
resumed run continues bit-exactly. Buffers (BatchNorm statistics) are never optimized: the
algorithm applies their plain mean delta.
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from fedlight.core.errors import require
from fedlight.core.tensors import StateDict

Slots = dict[str, Tensor]  # one parameter's optimizer state: slot name → tensor


@dataclass
class ServerOptimizer(ABC):
    lr: float = 1.0  # η
    slots: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        require(self.lr > 0, f"server_opt.lr={self.lr} must be > 0")

    def init_state(self, weights: StateDict, trainable: frozenset[str]) -> StateDict:
        """The round-0 slots of every trainable parameter, as server extras."""
        return {
            f"{slot}/{name}": self.initial_slot(slot, param)
            for name, param in weights.items()
            if name in trainable
            for slot in self.slots
        }

    def initial_slot(self, slot: str, param: Tensor) -> Tensor:
        """Round-0 value of an optimizer slot; zero unless the method says otherwise."""
        return torch.zeros_like(param)

    @abstractmethod
    def direction(self, delta: Tensor, state: Slots) -> tuple[Tensor, Slots]:
        """The step before η for one parameter, and its new slots, from Δ and the old slots."""

    def step(
        self, weights: StateDict, pseudo_gradient: StateDict, extras: StateDict
    ) -> tuple[StateDict, StateDict]:
        """x + η · direction for each parameter in `pseudo_gradient` (in `weights` order), and the
        extras with the new slots."""
        moved: StateDict = {}
        extras = dict(extras)
        for name, current in weights.items():
            if name not in pseudo_gradient:
                continue
            state: Slots = {slot: extras[f"{slot}/{name}"] for slot in self.slots}
            direction, new_state = self.direction(pseudo_gradient[name].to(current.dtype), state)
            extras.update({f"{slot}/{name}": value for slot, value in new_state.items()})
            moved[name] = current + self.lr * direction.to(current.dtype)
        return moved, extras


@dataclass
class AdaptiveServerOptimizer(ServerOptimizer):
    """Algorithm 2's common part: m_t = β1 m + (1 − β1) Δ;  x ← x + η m_t / (√v_t + τ).

    No bias correction (as in the paper); v starts at τ² (the paper asks v_{-1} ≥ τ²; with
    `initial_v=zero` at 0, as Flower's FedAdam and optax start it), m at 0. Subclasses give the
    second-moment rule v_t = f(v_{t-1}, Δ²).
    """

    lr: float = 0.01
    beta1: float = 0.9
    tau: float = 1e-3
    # v's round-0 value: tau_squared (the paper's v_{-1} = τ²) | zero (Flower's FedAdam, optax)
    initial_v: str = "tau_squared"

    slots: ClassVar[tuple[str, ...]] = ("m", "v")

    def __post_init__(self) -> None:
        super().__post_init__()
        require(0 <= self.beta1 < 1, f"server_opt.beta1={self.beta1} must be in [0, 1)")
        require(self.tau > 0, f"server_opt.tau={self.tau} must be > 0 (e.g. 1e-3)")
        require(
            self.initial_v in ("tau_squared", "zero"),
            f"server_opt.initial_v={self.initial_v} is not an initial second moment; use "
            "tau_squared (the paper's) or zero (Flower's FedAdam, optax)",
        )

    def initial_slot(self, slot: str, param: Tensor) -> Tensor:
        if slot == "v" and self.initial_v == "tau_squared":
            return torch.full_like(param, self.tau**2)
        return torch.zeros_like(param)

    @abstractmethod
    def second_moment(self, v: Tensor, delta_sq: Tensor) -> Tensor:
        """v_t from v_{t-1} and Δ_t²."""

    def moments(self, delta: Tensor, state: Slots) -> tuple[Tensor, Tensor]:
        """m_t and v_t from Δ and the old slots."""
        m = self.beta1 * state["m"] + (1 - self.beta1) * delta
        return m, self.second_moment(state["v"], delta * delta)

    def direction(self, delta: Tensor, state: Slots) -> tuple[Tensor, Slots]:
        m, v = self.moments(delta, state)
        return m / (v.sqrt() + self.tau), {"m": m, "v": v}
