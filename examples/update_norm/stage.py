"""A new upload stage kind, `update_norm` (docs/howto/add-stage.md): each participant measures the
L2 norm of its model update and, with `max_norm`, scales the update down to it before sending.

Measuring comes first in practice: a norm bound (`aggregator=norm_clip`'s M, DP-FedAvg's clip,
McMahan et al., "Learning Differentially Private Recurrent Language Models", ICLR 2018) is chosen
from the norms honest clients send. Each client reports its norm with its upload (4 bytes on the
wire, counted in bytes_up, as a selector's report is); once the round is gathered the server puts
the mean and the largest into the round's row of metrics.csv, and with `max_norm` the share of
clients whose update was clipped. The norm is taken before clipping.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from fedlight import ClientStep, ClientUpload, Delivered, RoundContext, StateDict, UploadStage

NORM = "norm"  # the one number each client reports to this stage


@dataclass
class UpdateNormStage(UploadStage):
    """`update_norm=none`, the stage kind's default: every hook as `UploadStage`'s (nothing)."""

    name = "update_norm"  # the namespace of the stage's state, reports and metrics


@dataclass
class UpdateNorm(UpdateNormStage):
    """`update_norm=log`: the norms measured, reported and logged; clipped with `max_norm`."""

    max_norm: float | None = None  # None: measure only

    def client_side(
        self, step: ClientStep, upload: ClientUpload, state: StateDict | None
    ) -> tuple[ClientUpload, StateDict | None]:
        """On the client: the norm of the model update's entries, reported; the update scaled to
        `max_norm` if longer."""
        keys = step.algorithm.model_update_keys(step.ctx, upload.tensors)
        update = {key: upload.tensors[key] for key in keys}
        norm = math.sqrt(sum(float(t.double().square().sum()) for t in update.values()))
        if self.max_norm is not None and norm > self.max_norm:
            clipped = {key: t * (self.max_norm / norm) for key, t in update.items()}
            upload = replace(upload, tensors=upload.tensors | clipped)
        return upload.reporting(self.name, {NORM: norm}), state

    def finish_round(
        self, ctx: RoundContext, state: StateDict, delivered: Sequence[Delivered]
    ) -> StateDict:
        """On the server, after the round's update: the reported norms into the metrics."""
        norms = [participant.reports[NORM] for participant in delivered if participant.reports]
        if norms:
            ctx.metrics.report(f"{self.name}.mean", sum(norms) / len(norms))
            ctx.metrics.report(f"{self.name}.max", max(norms))
        if norms and self.max_norm is not None:
            clipped = sum(norm > self.max_norm for norm in norms)
            ctx.metrics.report(f"{self.name}.clipped", clipped / len(norms))
        return state
