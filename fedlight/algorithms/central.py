"""Centralized training: the "centralized" reference of federated-learning papers (the SCAFFOLD
tutorial's centralized column; McMahan et al., AISTATS 2017, compare against it too).

One model trains on the pooled training data of all clients with the same model, optimizer, batch
size and local epochs as the federated run, and does the same amount of work: each round it draws,
without replacement, as many pooled examples as the round's selected clients hold together
(all of them when every client takes part) and trains its local epochs on them, continuing from
the previous round. So a round processes the same number of sample gradients as a federated round;
the number of optimizer steps differs only by the clients' partial last batches. The optimizer
(and its momentum) restarts each round, as it does for every client. Nothing is communicated.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from fedlight.algorithms.local import Local
from fedlight.core.context import Federation, RoundContext
from fedlight.core.messages import ServerState
from fedlight.core.rng import Stream
from fedlight.core.tensors import StateDict

# The pooled trainer is stored (and checkpointed) as the state of this participant id.
POOLED_TRAINER = 0


@dataclass
class Central(Local):
    """`Local` training of a single participant that holds everybody's data."""

    pools_data: ClassVar[bool] = True
    per_client_models: ClassVar[bool] = False  # one model: the pooled trainer's

    def participants(
        self, ctx: RoundContext, client_indices: Sequence[Tensor]
    ) -> list[tuple[int, Tensor]]:
        """One trainer on a draw from everybody's pooled examples: O(all examples) per round by
        definition, like a centralized epoch; no state per client is kept."""
        pool = torch.cat(list(client_indices))
        size = sum(len(client_indices[client]) for client in ctx.selected)
        generator = ctx.generator(Stream.POOLING)
        drawn = torch.as_tensor(generator.permutation(len(pool))[:size], device=pool.device)
        return [(POOLED_TRAINER, pool[drawn])]

    def global_model(
        self, federation: Federation, server: ServerState, client_states: Mapping[int, StateDict]
    ) -> StateDict:
        """The pooled trainer's model (the server's never changes)."""
        return client_states.get(POOLED_TRAINER, server.weights)
