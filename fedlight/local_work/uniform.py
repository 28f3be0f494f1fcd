"""`local_work=uniform`: each participant's epochs drawn anew every round, uniformly from the
integers `low` … `high`, as in FedNova's experiments (Wang et al., NeurIPS 2020, Section 6: local
epochs uniform in [2, 5]); from the generator of (seed, LOCAL_WORK, round, client)."""

from dataclasses import dataclass

from fedlight.core.context import RoundContext
from fedlight.core.errors import require
from fedlight.core.rng import Stream
from fedlight.local_work.base import LocalWork


@dataclass
class Uniform(LocalWork):
    low: int = 2
    high: int = 5

    def __post_init__(self) -> None:
        require(
            1 <= self.low <= self.high,
            f"local_work.low={self.low} and local_work.high={self.high} need "
            "1 <= low <= high (epochs drawn from low … high)",
        )

    def epochs(self, ctx: RoundContext, client: int) -> int | None:
        return int(ctx.generator(Stream.LOCAL_WORK, client).integers(self.low, self.high + 1))

    def most_epochs(self, configured: int) -> int:
        return self.high
