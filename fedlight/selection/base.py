"""The interface of a client-selection strategy."""

from typing import Protocol

from fedlight.context import RoundContext


class Selection(Protocol):
    def select(self, ctx: RoundContext, clients_per_round: int) -> list[int]:
        """The round's clients; randomness from `ctx.generator(Stream.SELECTION)`."""
        ...
