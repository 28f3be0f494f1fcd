"""The one signature of an upload stage, and the typed states the pipelines keep for stages.

An upload stage is one step of the chain every client upload goes through after the algorithm
computed it (selection's report, an attack, privacy's clip, the wire's codecs; see
`fedlight.round`). It acts at up to five points, each a method that does nothing by default:

- `client_side`: on the client, in chain order: the changed upload (its tensors, and the numbers
  it reports under the stage's name) and the stage's new client state;
- `server_side`: on the server, per upload, in reverse chain order (a codec's decoding);
- `gathered`: on the server, once every upload of the round is in (an attack that forges from
  the benign updates); a stage with `holds_uploads` keeps the round from streaming its uploads;
- `start_aggregation`: how the decoded uploads are combined, for a stage that replaces the
  algorithm's aggregation (DP-FedAvg's clipped, noised sum); the first such stage wins;
- `finish_round`: after the server update, in reverse chain order: the stage's server state
  from what the round's participants delivered (a selector's scores, a privacy accountant).

A stage's state is its own mapping name → tensor, on the server (`StageStates`, one entry per
stage name, checkpointed) and on each client (`ClientState.stages`): no stage sees another's.

Besides these, a stage may declare what it needs of the run (`check_run`, asked before any
work, with the whole chain: a stage's requirements on selection, aggregation or the other stages
live with the stage), what its own protocol messages cost a participant (`protocol_bytes`), and
how it changes the round's aggregation once chosen (`adapt_aggregation`: secure aggregation sums
masked parts), whether its server side decodes the uploads (`decodes_uploads`) and whether the
server learns only their sum (`hides_uploads`).
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

from fedlight.core.context import Federation, RoundContext
from fedlight.core.messages import ClientUpload, Delivered, LocalResult, StageStates
from fedlight.core.settings import RunSettings
from fedlight.core.tensors import StateDict
from fedlight.stages.pool import ClientPool

if TYPE_CHECKING:
    from fedlight.aggregation.base import RoundAggregation
    from fedlight.algorithms.base import Algorithm


@dataclass(frozen=True)
class StageSetup:
    """What a stage's initial server state may depend on."""

    settings: RunSettings
    federation: Federation
    client_sizes: Sequence[int]  # every client's number of training examples
    algorithm: "Algorithm"  # what each upload holds (a mechanism that noises it must know)


class SelectionTraits(Protocol):
    """What a stage may ask of the run's selector (`Selection` declares each)."""

    @property
    def measures_training_data(self) -> str | None:
        """What the selector measures on the clients' training data, in words; None: nothing."""

    @property
    def poisson_sampling(self) -> bool:
        """Whether each client takes part independently with probability K/N."""

    @property
    def draws_by_size(self) -> bool:
        """Whether each client is drawn with probability ∝ its data size."""


@dataclass(frozen=True)
class Plan:
    """What a stage's `check_run` may ask of the run before any work: the settings, each config
    group's option (for messages), the algorithm (with its aggregator) and the whole chain."""

    settings: RunSettings
    choices: Mapping[str, str]
    algorithm: "Algorithm"
    selection: SelectionTraits
    stages: Sequence["UploadStage"]  # chain order
    most_local_epochs: int  # the most epochs a participant trains in a round (`local_work`)

    def after(self, stage: "UploadStage") -> Sequence["UploadStage"]:
        """The stages a client applies after `stage`."""
        return self.stages[list(self.stages).index(stage) + 1 :]

    def before(self, stage: "UploadStage") -> Sequence["UploadStage"]:
        """The stages a client applies before `stage`."""
        return self.stages[: list(self.stages).index(stage)]


@dataclass(frozen=True)
class ClientStep:
    """One participant's upload as its stages see it on the client."""

    ctx: RoundContext  # the round, with this client's metrics channel
    client: int
    local: LocalResult  # what its local training produced
    algorithm: "Algorithm"
    broadcast: Mapping[str, StateDict]  # each stage's server state as the round began
    pool: ClientPool  # the selector's questions (a report evaluates the trained model)
    stages: Sequence["UploadStage"] = ()  # the whole chain (a stage that must know the others)


class UploadStage:
    """One step of the upload pipeline; every method does nothing by default (module docstring).
    `name` is the stage's namespace: of its state, client and server, and of its reports."""

    name: ClassVar[str] = ""

    def holds_uploads(self, federation: Federation) -> bool:
        """Whether `gathered` needs every upload of a round at once.

        Args:
            federation: the run's fixed facts.

        Returns:
            True where the round may not stream its uploads; False by default.
        """
        return False

    def initial_state(self, setup: StageSetup) -> StateDict:
        """The stage's server state before round 1.

        Args:
            setup: the settings, the federation and every client's size.

        Returns:
            The initial server state, key → tensor; empty by default.
        """
        return {}

    def check_run(self, plan: Plan) -> None:
        """Refuse (ConfigError, one line) what the stage cannot run with, before any work.

        Args:
            plan: the run's settings, choices, algorithm, selection and whole chain.

        Raises:
            ConfigError: a setting or another stage the stage cannot run with.
        """
        return None

    def needs_each_upload(self) -> bool:
        """Whether the server side must see each client's decoded upload (an attack that forges
        from the benign updates), which a stage that hides them (secure aggregation) refuses.

        Returns:
            True where it must; False by default.
        """
        return False

    def encodes_uploads(self) -> bool:
        """Whether `client_side` re-encodes the upload's tensors (a codec), which a stage whose
        output must reach the server as it is (masked ring elements) refuses after it.

        Returns:
            True where it does; False by default.
        """
        return False

    def decodes_uploads(self) -> bool:
        """Whether `server_side` changes each arrived upload (a codec's decoding), which secure
        aggregation refuses before it: it would decode masked ring elements.

        Returns:
            By default, whether the stage's class overrides `server_side`.
        """
        return type(self).server_side is not UploadStage.server_side

    def hides_uploads(self) -> bool:
        """Whether the server learns only the sum of the round's uploads (secure aggregation):
        no round then gives the loggers per-client rows, and a round it cannot unmask reveals
        nothing of its participants, reporting no training loss or logged value of theirs.

        Returns:
            True where it does; False by default.
        """
        return False

    def protocol_bytes(self, ctx: RoundContext, client: int) -> tuple[int, int]:
        """Bytes (up, down) of the stage's own messages for a participant this round, besides
        the upload and the download (a key agreement); counted in bytes_up/bytes_down.

        Args:
            ctx: the round.
            client: the participant.

        Returns:
            (bytes up, bytes down); (0, 0) by default.
        """
        return 0, 0

    def asynchronous_refusal(self) -> str | None:
        """Why the stage cannot run under the asynchronous driver (one update per arrival or
        buffer, clients dispatched as slots free up), in words; None: it can.

        Returns:
            The reason, in words, or None by default.
        """
        return None

    def client_side(
        self, step: ClientStep, upload: ClientUpload, state: StateDict | None
    ) -> tuple[ClientUpload, StateDict | None]:
        """The upload as the stage passes it on, and the client's new state of this stage (None:
        none); numbers the client reports go in `upload.reports[self.name]`.

        Args:
            step: the participant, its round, local result, algorithm and the chain.
            upload: the upload as the stages before this one left it.
            state: the client's state of this stage; None where it has none yet.

        Returns:
            The upload passed on and the client's new state of this stage; by default both as
            they came.
        """
        return upload, state

    def server_side(
        self, ctx: RoundContext, upload: ClientUpload, state: StateDict
    ) -> tuple[ClientUpload, StateDict]:
        """One arrived upload as the stage's server side passes it on, and its new state.

        Args:
            ctx: the round.
            upload: the upload as the later stages' server sides left it (reverse chain order).
            state: the stage's server state.

        Returns:
            The upload passed on and the stage's new server state; by default as they came.
        """
        return upload, state

    def gathered(
        self, ctx: RoundContext, uploads: Iterable[ClientUpload], algorithm: "Algorithm"
    ) -> Iterable[ClientUpload]:
        """The round's decoded uploads, once all are in (lazily passed through by default).

        Args:
            ctx: the round.
            uploads: the round's decoded uploads, in aggregation order.
            algorithm: the run's algorithm.

        Returns:
            The uploads the round aggregates, in order.
        """
        return uploads

    def start_aggregation(
        self,
        ctx: RoundContext,
        state: StateDict,
        algorithm: "Algorithm",
        sample_counts: Sequence[int],
    ) -> "RoundAggregation | None":
        """The round's aggregation when the stage replaces the algorithm's; None: it does not.

        Args:
            ctx: the round.
            state: the stage's server state.
            algorithm: the run's algorithm.
            sample_counts: each participant's training examples, in aggregation order.

        Returns:
            The round's aggregation, or None by default.
        """
        return None

    def adapt_aggregation(
        self, ctx: RoundContext, state: StateDict, aggregation: "RoundAggregation"
    ) -> "RoundAggregation":
        """The round's aggregation as the stage changes it, once chosen (in chain order).

        Args:
            ctx: the round.
            state: the stage's server state.
            aggregation: the round's aggregation as chosen and changed so far.

        Returns:
            The aggregation the round uses; by default as it came.
        """
        return aggregation

    def finish_round(
        self, ctx: RoundContext, state: StateDict, delivered: Sequence[Delivered]
    ) -> StateDict:
        """The stage's server state after the round (`delivered`: its participants, in order,
        with the numbers they reported to this stage).

        Args:
            ctx: the round.
            state: the stage's server state.
            delivered: the round's participants, in order, with their reports to this stage.

        Returns:
            The stage's new server state; by default as it came.
        """
        return state


def round_aggregation(
    ctx: RoundContext,
    algorithm: "Algorithm",
    stages: Sequence[UploadStage],
    states: StageStates,
    sample_counts: Sequence[int],
) -> "RoundAggregation":
    """The round's aggregation for participants with `sample_counts` (participant order): the
    first stage's that replaces the algorithm's, else the algorithm's, as each stage adapts it
    in chain order (`ServerRound.start`; a stage that must know its upload's weights)."""
    replaced = (
        stage.start_aggregation(ctx, states.get(stage.name, {}), algorithm, sample_counts)
        for stage in stages
    )
    chosen = next((a for a in replaced if a is not None), None)
    aggregation = algorithm.start_aggregation(sample_counts) if chosen is None else chosen
    for stage in stages:
        aggregation = stage.adapt_aggregation(ctx, states.get(stage.name, {}), aggregation)
    return aggregation
