"""The contract between the FederatedLoop and an algorithm.

Following fedjax, an algorithm is a few functions over explicit state: the server's `ServerState`
and, for stateful methods, a per-client state. The loop owns everything else (selection, local
training, logging, checkpoints), so adding an algorithm never changes the loop. Each hook has a
default that does nothing, so FedAvg overrides only what it needs.
"""

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import pytorch_lightning as pl
import torch
from torch import Tensor

from fedlight.tensors import StateDict


@dataclass
class ServerState:
    """The global model plus any server-side algorithm state (control variates, moments...)."""

    weights: StateDict
    extras: StateDict = field(default_factory=dict)


@dataclass
class LocalResult:
    """What local training produced on one client, before the algorithm decides what to send.

    `weights` share storage with the engine (the sequential engine's one client module): valid
    until the next client's result is asked for, so an algorithm that keeps them must copy them.
    """

    client_id: int
    weights: StateDict
    num_samples: int
    num_steps: int
    lr: float  # the local learning rate of this round (first parameter group)
    train_loss: float


@dataclass
class ClientUpload:
    """What one client sends to the server: `tensors` are counted byte for byte."""

    client_id: int
    num_samples: int
    num_steps: int
    tensors: StateDict


class LocalCallback:
    """Lightning-style hooks an algorithm adds to a client's local training.

    The sequential engine calls them right after the client module's hook of the same name, on
    the client being trained only (SCAFFOLD corrects gradients in `on_after_backward`, FedProx
    adds its proximal term). The vectorized engine has no module per client: it calls
    `correct_gradients` of the `stack`ed callbacks of all clients instead.
    """

    def on_before_backward(self, module: pl.LightningModule, loss: Tensor) -> None:
        """Called with the loss of a local step before backpropagation."""

    def on_after_backward(self, module: pl.LightningModule) -> None:
        """Called once gradients exist and before the optimizer sees them."""

    def on_before_optimizer_step(
        self, module: pl.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        """Called right before each optimizer step."""

    def correct_gradients(self, params: StateDict, grads: StateDict) -> StateDict:
        """The same correction as `on_after_backward`, for engines without a module (the
        vectorized engine): the corrected gradients `grads` of the trainable parameters `params`,
        name → tensor. Called on a `stack`ed callback, every tensor has a leading client
        dimension. Override it (and `stack`) only if it is the callback's whole effect; a
        callback without it trains on the sequential engine only."""
        raise NotImplementedError

    @classmethod
    def stack(cls: type["CallbackT"], callbacks: Sequence["CallbackT"]) -> "CallbackT":
        """One callback acting as `callbacks` (one per client, of this class) on tensors stacked
        along a new leading client dimension, in their order: the vectorized engine corrects all
        clients' gradients in one call."""
        raise NotImplementedError


CallbackT = TypeVar("CallbackT", bound=LocalCallback)


class Algorithm(ABC):
    """Server and client rules of one federated algorithm."""

    trainable: frozenset[str] = frozenset()  # names of the model's parameters (not buffers)
    num_clients: int = 0  # N, the size of the federation

    def init_server(
        self, weights: StateDict, trainable: frozenset[str], num_clients: int
    ) -> ServerState:
        """Server state for the initial global model; `trainable` names the parameters."""
        self.trainable = trainable
        self.num_clients = num_clients
        return ServerState(weights)

    def participants(
        self,
        selected: Sequence[int],
        client_indices: Sequence[Tensor],
        generator: np.random.Generator,
    ) -> list[tuple[int, Tensor]]:
        """Who trains this round and on which training examples: each selected client on its own
        data. `generator` is this round's own (Stream.POOLING), for algorithms that resample."""
        return [(client, client_indices[client]) for client in selected]

    def download(self, server: ServerState) -> StateDict:
        """Everything sent to each selected client (counted in bytes): the global model."""
        return server.weights

    def start_weights(self, server: ServerState, client_state: StateDict | None) -> StateDict:
        """The weights a client's local training starts from: the global model, unless the
        algorithm keeps a model of the client's own (local training, personalization)."""
        return server.weights

    def local_callbacks(
        self, server: ServerState, client_state: StateDict | None
    ) -> list[LocalCallback]:
        """Hooks into the local training of one client; `client_state` is None before its first
        round."""
        return []

    @abstractmethod
    def upload(
        self, server: ServerState, local: LocalResult, client_state: StateDict | None
    ) -> tuple[ClientUpload, StateDict | None]:
        """What the client sends, and its new persistent state (None for stateless methods)."""

    @abstractmethod
    def server_update(self, server: ServerState, uploads: Sequence[ClientUpload]) -> ServerState:
        """The next server state from this round's uploads."""

    def evaluated_models(
        self, server: ServerState, client_states: Mapping[int, StateDict]
    ) -> Iterable[StateDict]:
        """The models whose test metrics are reported (mean and spread): the global model. The
        loop evaluates them one at a time as they are produced, so an iterator can stream many."""
        return [server.weights]
