"""The messages of a round, which every layer that takes part in one speaks: what local training
produced (`LocalResult`), what a client sends (`ClientUpload`, its sender a `Contributor`), what
the server learns of each participant (`Delivered`) and the states kept between rounds
(`ServerState`, `ClientState`, `StageStates`). They are plain records over tensors, so that the
engines, the algorithms, the stages and the pipelines meet on them without importing each other.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from fedlight.core.tensors import StateDict

REPORTED_NUMBER_BYTES = 4  # a reported number crosses the wire as a float32


# Each stage's server state, by stage name.
StageStates = dict[str, StateDict]


@dataclass
class ServerState:
    """The global model plus any server-side algorithm state (control variates, moments...)."""

    weights: StateDict
    extras: StateDict = field(default_factory=dict)


class Contributor(NamedTuple):
    """Who sent an upload, and the numbers its weights come from."""

    client: int
    num_samples: int
    num_steps: int


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
    examples: int = 0  # examples trained on, over all steps (the work on a system's clock)
    # what the algorithm's callbacks measured during training (`LocalCallback.measured`)
    measured: StateDict = field(default_factory=dict)
    # what the module logged (`self.log`) in training: name → (weighted sum, weight), which add
    # up over clients to the round's means (`fedlight.engines.module_logs.TrainingLogs`)
    logged: dict[str, tuple[float, float]] = field(default_factory=dict)


@dataclass
class ClientUpload:
    """What one client sends to the server: `tensors` are counted byte for byte."""

    client_id: int
    num_samples: int
    num_steps: int
    tensors: StateDict
    # numbers sent besides the tensors, by the upload stage that reports them (4 bytes each)
    reports: dict[str, dict[str, float]] = field(default_factory=dict)
    # True: the client sent no tensors, its update not being finite (secure aggregation never
    # sends one unmasked); the server counts it rejected, a dropout of the round
    withheld: bool = False

    @property
    def contributor(self) -> Contributor:
        """Its sender and the numbers its aggregation weights come from."""
        return Contributor(self.client_id, self.num_samples, self.num_steps)

    def reporting(self, stage: str, numbers: dict[str, float]) -> "ClientUpload":
        """This upload with `numbers` reported under `stage` (none: the upload itself).

        Args:
            stage: the reporting stage's name.
            numbers: name → value, sent besides the tensors (4 bytes each).

        Returns:
            A copy with the reports added, or this upload when there are none.
        """
        if not numbers:
            return self
        return replace(self, reports=self.reports | {stage: numbers})

    @property
    def reported_numbers(self) -> int:
        """How many numbers the upload reports besides its tensors (each counted as 4 bytes)."""
        return sum(len(numbers) for numbers in self.reports.values())


@dataclass(frozen=True)
class Delivered:
    """What the server learns of one participant once the round is gathered."""

    client: int
    num_steps: int
    reports: Mapping[str, float]  # the numbers the stage's `client_side` reported
    accepted: bool  # False: rejected (NaN/Inf entries) or late: left out of the aggregates
    late: bool = False  # it missed the system's deadline: nothing of it arrived


@dataclass
class ClientState:
    """A client's persistent state: the algorithm's entries, and each stage's by name."""

    algorithm: StateDict | None = None
    stages: StageStates = field(default_factory=dict)

    @classmethod
    def of(cls, stored: StateDict | None) -> "ClientState":
        """The state a client-state store holds as one flat mapping: the algorithm's entries
        under their names (state-dict names have no "/"), a stage's as "<stage>/<key>"."""
        algorithm: StateDict = {}
        stages: StageStates = {}
        for key, t in (stored or {}).items():
            stage, slash, name = key.partition("/")
            if slash:
                stages.setdefault(stage, {})[name] = t
            else:
                algorithm[key] = t
        return cls(algorithm or None, stages)

    def stored(self) -> StateDict:
        """The flat mapping a store keeps (`of` undone)."""
        flat = dict(self.algorithm or {})
        for stage, entries in self.stages.items():
            flat |= {f"{stage}/{key}": t for key, t in entries.items()}
        return flat

    def with_stage(self, name: str, state: StateDict | None) -> "ClientState":
        stages = {key: value for key, value in self.stages.items() if key != name}
        if state:
            stages[name] = state
        return ClientState(self.algorithm, stages)
