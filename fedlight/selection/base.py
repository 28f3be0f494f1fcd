"""The interface of a client-selection strategy."""

from typing import Protocol

import numpy as np


class Selection(Protocol):
    def select(
        self, round_index: int, num_clients: int, clients_per_round: int, rng: np.random.Generator
    ) -> list[int]: ...
