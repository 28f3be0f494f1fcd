"""`local_work=fixed` (the default): every participant trains `local.epochs`, as McMahan et al.'s
FedAvg (AISTATS 2017); nothing is drawn and metrics.csv gains no column."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from fedlight.core.context import RoundContext
from fedlight.local_work.base import LocalWork


@dataclass
class Fixed(LocalWork):
    # a run recorded before `local_work` existed trained equal work: it resumes as this option
    as_before_the_group: ClassVar[bool] = True

    def epochs(self, ctx: RoundContext, client: int) -> int | None:
        return None

    def report(self, ctx: RoundContext, participants: Sequence[int], configured: int) -> None:
        """Nothing: a run with equal work writes the columns it always wrote."""
