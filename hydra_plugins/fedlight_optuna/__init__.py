"""fedlight's `hydra/sweeper=optuna` (fedlight/runs/optuna_sweeper.py): Hydra's Optuna sweeper with
a study kept in the sweep directory that continues where it stopped, diverged trials given the
worst value, and the objective's direction.

Hydra instantiates plugins only from the `hydra_plugins` namespace and imports every module in it
at start-up, so this one is light (the sweeper's work, and optuna, load when a sweep sets it up).
Its config replaces Hydra's under the same name: fedlight's entry point stores it
(`fedlight.cli.main.register_configs`) once Hydra's plugin scan (which runs every plugin module, in
an order of the search path's making) has stored Hydra's. This plugin is the top of fedlight's
layers: it imports fedlight, and nothing of fedlight imports it.
"""

from collections.abc import Callable
from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class FedlightOptunaSweeper(Sweeper):
    """Hydra's Optuna sweeper whose study survives its process (fedlight.runs.optuna_sweeper)."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings
        self.study: Any = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        from fedlight.runs.optuna_sweeper import StudySweep

        self.study = refused_in_one_line(
            StudySweep, self.settings, hydra_context, task_function, config
        )

    def sweep(self, arguments: list[str]) -> None:
        refused_in_one_line(self.study.sweep, arguments)


def refused_in_one_line(call: Callable[..., Any], *args: Any) -> Any:
    """`call(*args)`; a setting it refuses ends the command as fedlight's checks do (exit 2)."""
    from fedlight.core.errors import ConfigError, fail

    try:
        return call(*args)
    except ConfigError as error:
        fail(str(error), 2)
