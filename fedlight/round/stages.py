"""The `Stages` record: the pluggable stages a run's rounds run, built out of their config groups
by the CLI (`fedlight.cli.build`), which refuses a combination that makes no sense before any
work.
"""

import dataclasses
from dataclasses import dataclass

from fedlight.algorithms.base import Algorithm
from fedlight.local_work.base import LocalWork
from fedlight.local_work.fixed import Fixed
from fedlight.lr_schedules.base import LRSchedule
from fedlight.stages.attacks.base import Attack
from fedlight.stages.base import UploadStage
from fedlight.stages.privacy.base import Privacy
from fedlight.stages.selection.base import Selection
from fedlight.stages.wire.base import Wire
from fedlight.system.base import System


@dataclass
class Stages:
    """What one round runs, besides data, model and local training."""

    algorithm: Algorithm  # with its aggregator and server optimizer
    selection: Selection
    lr_schedule: LRSchedule
    wire: Wire
    attack: Attack = dataclasses.field(default_factory=Attack)
    privacy: Privacy = dataclasses.field(default_factory=Privacy)
    system: System = dataclasses.field(default_factory=System)
    local_work: LocalWork = dataclasses.field(default_factory=Fixed)  # each participant's epochs
    chained: tuple[UploadStage, ...] = ()  # the `CHAINED_GROUPS`' stages, in their order

    @property
    def upload(self) -> list[UploadStage]:
        """The upload stages in the order a client applies them (the server undoes them in
        reverse); the wire encodes last."""
        return [self.selection, self.attack, self.privacy, *self.chained, self.wire]
