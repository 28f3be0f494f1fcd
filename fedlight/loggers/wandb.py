"""Weights & Biases: one W&B run per job, step = round; the jobs of a sweep share a group,
job_type is the algorithm and the tags are the config-group choices (`algo=scaffold`, ...).

Offline automatically when there is no API key or no network; any W&B failure is reported once and
then ignored, so W&B trouble never fails or loses a run (metrics.csv has everything).
"""

import os
import socket
import warnings
from dataclasses import dataclass, field
from typing import Any

from fedlight.loggers.base import MetricsRow, RunInfo

WANDB_HOST = ("api.wandb.ai", 443)


def has_api_key() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc = os.path.expanduser("~/.netrc")
    return os.path.exists(netrc) and "api.wandb.ai" in open(netrc).read()


def network_reachable(timeout: float = 2.0) -> bool:
    try:
        socket.create_connection(WANDB_HOST, timeout=timeout).close()
        return True
    except OSError:
        return False


def choose_mode(requested: str) -> str:
    if requested != "auto":
        return requested
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    return "online" if has_api_key() and network_reachable() else "offline"


@dataclass
class WandbLogger:
    project: str = "fedlight"
    entity: str | None = None
    mode: str = "auto"
    tags: list[str] = field(default_factory=list)
    _run: Any = field(default=None, init=False, repr=False)

    def start(self, run: RunInfo) -> None:
        try:
            import wandb

            self._run = wandb.init(
                project=self.project,
                entity=self.entity,
                mode=choose_mode(self.mode),
                dir=os.environ.get("WANDB_DIR", str(run.output_dir)),
                group=run.sweep_group,
                job_type=run.choices.get("algo"),
                config=run.config,
                tags=[*self.tags, *(f"{group}={choice}" for group, choice in run.choices.items())],
                reinit="finish_previous",
            )
        except Exception as failure:  # noqa: BLE001 - W&B must never fail a run
            self._disable(failure)

    def log_round(self, row: MetricsRow) -> None:
        if self._run is None:
            return
        try:
            self._run.log({k: v for k, v in row.items() if k != "round"}, step=int(row["round"]))
        except Exception as failure:  # noqa: BLE001
            self._disable(failure)

    def finish(self, summary: dict[str, Any]) -> None:
        if self._run is None:
            return
        try:
            self._run.summary.update(summary)
            self._run.finish()
        except Exception as failure:  # noqa: BLE001
            self._disable(failure)

    def _disable(self, failure: Exception) -> None:
        warnings.warn(f"W&B logging disabled: {failure}", stacklevel=2)
        self._run = None
