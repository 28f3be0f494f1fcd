"""fedlight's `hydra/sweeper=optuna` (fedlight/optuna_sweeper.py): Hydra's Optuna sweeper with a
study kept in the sweep directory that continues where it stopped, diverged trials given the
worst value, and the objective's direction.

Hydra instantiates plugins only from the `hydra_plugins` namespace and imports every module in it
at start-up, so this one is light (the sweeper's work, and optuna, load when a sweep sets it up).
Its config replaces Hydra's under the same name, `register_config()`, called by fedlight once
Hydra's plugin scan (which runs every plugin module, in an order of the search path's making) has
stored Hydra's.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class FedlightOptunaSweeper(Sweeper):
    """Hydra's Optuna sweeper whose study survives its process (fedlight.optuna_sweeper)."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings
        self.study: Any = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        from fedlight.optuna_sweeper import StudySweep

        self.study = refused_in_one_line(
            StudySweep, self.settings, hydra_context, task_function, config
        )

    def sweep(self, arguments: list[str]) -> None:
        refused_in_one_line(self.study.sweep, arguments)


def refused_in_one_line(call: Callable[..., Any], *args: Any) -> Any:
    """`call(*args)`; a setting it refuses ends the command as fedlight's checks do (exit 2)."""
    from fedlight.cli import fail
    from fedlight.errors import ConfigError

    try:
        return call(*args)
    except ConfigError as error:
        fail(str(error), 2)


def register_config() -> None:
    """`hydra/sweeper=optuna` as fedlight's sweeper with fedlight's defaults, over Hydra's;
    nothing without the `optuna` extra (fedlight's checks then name the extra to install)."""
    try:
        from hydra_plugins.hydra_optuna_sweeper.config import OptunaSweeperConf
    except ImportError:
        return
    # alembic (Optuna's storage) says at INFO how it sets itself up when Hydra imports optuna
    # for the sampler: seven lines in Hydra's log format that tell a user nothing
    logging.getLogger("alembic").setLevel(logging.WARNING)

    @dataclass
    class FedlightOptunaSweeperConf(OptunaSweeperConf):
        """Hydra's settings with fedlight's defaults: see fedlight/optuna_sweeper.py."""

        _target_: str = "hydra_plugins.fedlight_optuna.FedlightOptunaSweeper"
        # TPE's (or another sampler's) draws; a continued study continues its pickled sampler
        sampler: Any = field(default_factory=lambda: {"seed": 0})
        direction: Any = None  # maximize | minimize; None: the objective's
        storage: Any = None  # an Optuna storage URL; None: sqlite:///<sweep dir>/optuna.db
        study_name: str | None = "fedlight"
        n_trials: int = 20  # the study's trials in all: a continued study runs those it lacks
        n_jobs: int = 1  # trials asked at once (run in parallel by hydra/launcher=joblib)

    ConfigStore.instance().store(
        group="hydra/sweeper",
        name="optuna",
        node=FedlightOptunaSweeperConf,
        provider="fedlight",
    )
