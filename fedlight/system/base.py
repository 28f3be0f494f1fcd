"""The system model (`system`): how fast each client computes and communicates, on a virtual
clock.

Every client gets, once per run from the derived generator (seed, SYSTEM), a slowdown of its
compute and one of its link; its compute time per example and its link times per byte are the
base values times them (the option draws the slowdowns: `homogeneous`, `uniform`, `lognormal`,
`tiers`). A participant's virtual time in a round follows from the work it actually did: bytes
received × seconds per byte down + examples trained on × seconds per example + bytes sent ×
seconds per byte up. Nothing sleeps: the clock is computed.

A synchronous round lasts as long as its slowest participant, after the selector's probe if it
asks clients before choosing (power-of-choice: the candidates, in parallel, receive the model,
evaluate it on their examples and answer; training starts once the slowest answer is in). An
evaluated example costs what a trained one does: the model has one compute speed, so this is an
upper bound on a forward pass. `deadline` (virtual seconds, counted from the start of training)
closes the round then: a participant that would finish later is a straggler, its update is lost
(left out of the aggregate, which renormalizes over the rest; its client state stays as it was)
and the round lasts the probe plus the deadline. `dropout` makes each selected client fail with
that probability, drawn per (seed, SYSTEM, round, client): it trains and sends nothing, and with
a deadline the server waits for it until the deadline. metrics.csv gains `virtual_time`
(cumulative seconds), `round_seconds`, `stragglers` and `dropped_out`.
"""

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.core.rng import Stream, numpy_generator


@dataclass(frozen=True)
class Speeds:
    """Every client's seconds per example trained and per byte received and sent."""

    per_example: np.ndarray
    per_byte_down: np.ndarray
    per_byte_up: np.ndarray

    def seconds(self, client: int, bytes_down: int, examples: int, bytes_up: int) -> float:
        """A participant's virtual time for the work it did in a round."""
        return float(
            bytes_down * self.per_byte_down[client]
            + examples * self.per_example[client]
            + bytes_up * self.per_byte_up[client]
        )


@dataclass
class System:
    """No system model: no virtual clock, no stragglers, no failures (the default)."""

    # The base speeds a slowdown of 1 gives: 1 ms per example, 1 MB/s up, 10 MB/s down.
    seconds_per_example: float = 1e-3
    seconds_per_byte_up: float = 1e-6
    seconds_per_byte_down: float = 1e-7
    deadline: float | None = None  # virtual seconds after which a round's stragglers are lost
    dropout: float = 0.0  # probability that a selected client fails in a round

    clocked: ClassVar[bool] = False  # whether it keeps a virtual clock (every option but none)

    def __post_init__(self) -> None:
        for name in ("seconds_per_example", "seconds_per_byte_up", "seconds_per_byte_down"):
            value = getattr(self, name)
            require(value >= 0, f"system.{name}={value} must be >= 0")
        require(
            self.deadline is None or self.deadline > 0,
            f"system.deadline={self.deadline} must be > 0 (null: no deadline)",
        )
        require(0 <= self.dropout < 1, f"system.dropout={self.dropout} must lie in [0, 1)")
        require(
            self.clocked or (self.deadline is None and self.dropout == 0),
            "system.deadline and system.dropout need a system model; choose one, e.g. "
            "system=homogeneous",
        )

    def slowdowns(
        self, num_clients: int, generator: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each client's compute and link slowdown (1: the base speed)."""
        return np.ones(num_clients), np.ones(num_clients)

    def speeds(self, num_clients: int, seed: int) -> Speeds:
        compute, link = self.slowdowns(num_clients, numpy_generator(seed, Stream.SYSTEM))
        return Speeds(
            per_example=self.seconds_per_example * compute,
            per_byte_down=self.seconds_per_byte_down * link,
            per_byte_up=self.seconds_per_byte_up * link,
        )

    def fails(self, ctx: RoundContext, client: int) -> bool:
        """Whether a selected client fails this round (drawn per round and client)."""
        return self.dropout > 0 and ctx.generator(Stream.SYSTEM, client).random() < self.dropout

    def round_seconds(self, finished: list[float], stragglers: int, failed: int) -> float:
        """How long a synchronous round's training lasts: its slowest reporting participant, or
        the deadline when the server waited for a straggler or a failed client."""
        if self.deadline is not None and (stragglers or failed):
            return self.deadline
        return max(finished, default=0.0)

    def late(self, seconds: float) -> bool:
        """Whether a participant that needs `seconds` misses the deadline."""
        return self.deadline is not None and seconds > self.deadline
