"""The local work of a round's participants (`local_work`): how many local epochs each trains.

FedAvg's clients all train `local.epochs` (E). The papers that define heterogeneity as clients
doing unequal work draw it instead: FedNova (Wang et al., NeurIPS 2020, Section 6) draws each
client's epochs anew every round; FedProx (Li et al., MLSys 2020, Section 5.2) makes a fraction of
a round's clients stragglers that train fewer epochs, and its FedAvg baseline drops them. An option
says, per (round, client), the epochs a participant trains, drawn only from the generators of
(seed, LOCAL_WORK, round, client) and (seed, STRAGGLERS, round), so every worker and a resumed run
draw the same; and which selected clients the round drops. What a client did is its own record:
its steps reach the algorithm (FedNova's ‖a_i‖₁, the proximal term at every step it takes), the
system's clock counts its examples, and its per-client row holds `local_epochs`, `local_steps`.
"""

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from fedlight.core.context import RoundContext


@dataclass
class LocalWork(ABC):
    """One option of the `local_work` group (module docstring)."""

    @abstractmethod
    def epochs(self, ctx: RoundContext, client: int) -> int | None:
        """The local epochs `client` trains this round.

        Args:
            ctx: the round, with its selected clients.
            client: one of `ctx.selected`.

        Returns:
            Its epochs; None: `local.epochs`, exactly as a run without unequal work.
        """

    def dropped(self, ctx: RoundContext) -> frozenset[int]:
        """The selected clients whose work the round leaves out: they train and send nothing.

        Args:
            ctx: the round, with its selected clients.

        Returns:
            The dropped clients; none by default.
        """
        return frozenset()

    def most_epochs(self, configured: int) -> int:
        """The most epochs a participant may train in a round (what an accountant bounds).

        Args:
            configured: `local.epochs`.

        Returns:
            The largest epochs `epochs` can give.
        """
        return configured

    def report(self, ctx: RoundContext, participants: Sequence[int], configured: int) -> None:
        """The round's columns in metrics.csv: `local_epochs_mean` over the participants.

        Args:
            ctx: the round, whose metrics channel gets the columns.
            participants: the clients that train this round.
            configured: `local.epochs`.
        """
        if participants:
            drawn = [self.epochs(ctx, client) for client in participants]
            epochs = [configured if e is None else e for e in drawn]
            ctx.metrics.report("local_epochs_mean", sum(epochs) / len(epochs))

    def asynchronous_refusal(self) -> str | None:
        """Why the option cannot run with an asynchronous algorithm (no rounds); None: it can.

        Returns:
            The reason, or None.
        """
        return None
