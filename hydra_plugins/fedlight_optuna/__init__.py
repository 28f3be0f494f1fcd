"""fedlight's `hydra/sweeper=optuna` (fedlight/runs/optuna_sweeper.py): an Optuna sweeper for
Hydra on Optuna's public API (optuna >= 4), with a study kept in the sweep directory that continues
where it stopped, diverged trials given the worst value, the objective's direction, and studies of
several objectives (a Pareto front).

It takes the settings of Hydra's own Optuna sweeper (hydra-optuna-sweeper, which pins optuna
below 3 and is not needed beside it) as users type them: `hydra.sweeper.params` with
`interval()`, `choice()`, `range()` and `tag(log, ...)`, `hydra/sweeper/sampler=tpe|random|...`,
`direction`, `storage`, `study_name`, `n_trials`, `n_jobs`, `max_failure_rate`,
`custom_search_space`; and fedlight's `objectives` (several summary.json numbers: a
multi-objective study).

Hydra instantiates plugins only from the `hydra_plugins` namespace and imports every module in it
at start-up, so this one is light (the sweeper's work, and optuna, load when a sweep sets it up).
Its configs are YAML in fedlight/conf/hydra/sweeper (`optuna.yaml`, `sampler/*.yaml`), found
before another Optuna sweeper's of the same names (fedlight's folder comes first in Hydra's search
path); the sampler's config reaches the sweeper unbuilt (`_recursive_: false`), which checks the
settings' types and builds it once optuna is known to be installed.
This plugin is the top of fedlight's layers: it imports fedlight, and nothing of fedlight imports
it.
"""

import importlib.util
from collections.abc import Callable
from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class FedlightOptunaSweeper(Sweeper):
    """An Optuna sweeper whose study survives its process (fedlight.runs.optuna_sweeper)."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings
        self.study: Any = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        if importlib.util.find_spec("optuna") is None:
            refused_in_one_line(missing_optuna)
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


def missing_optuna() -> None:
    from fedlight.core.errors import ConfigError

    raise ConfigError(
        "hydra/sweeper=optuna needs optuna, which is not installed: pip install 'fedlight[optuna]'"
    )
