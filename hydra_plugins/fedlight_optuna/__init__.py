"""fedlight's `hydra/sweeper=optuna` (fedlight/optuna_sweeper.py): an Optuna sweeper for Hydra on
Optuna's public API (optuna >= 4), with a study kept in the sweep directory that continues where it
stopped, diverged trials given the worst value, the objective's direction, and studies of several
objectives (a Pareto front).

It takes the settings of Hydra's own Optuna sweeper (hydra-optuna-sweeper, which pins optuna
below 3 and is not needed beside it) as users type them: `hydra.sweeper.params` with
`interval()`, `choice()`, `range()` and `tag(log, ...)`, `hydra/sweeper/sampler=tpe|random|...`,
`direction`, `storage`, `study_name`, `n_trials`, `n_jobs`, `max_failure_rate`,
`custom_search_space`; and fedlight's `objectives` (several summary.json numbers: a
multi-objective study).

Hydra instantiates plugins only from the `hydra_plugins` namespace and imports every module in it
at start-up, so this one is light (the sweeper's work, and optuna, load when a sweep sets it up).
Its configs are stored by `register_config()`, called by fedlight once Hydra's plugin scan (which
runs every plugin module, in an order of the search path's making) is done, so that they replace
those of another Optuna sweeper installed beside fedlight under the same names.
"""

import importlib.util
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class FedlightOptunaSweeper(Sweeper):
    """An Optuna sweeper whose study survives its process (fedlight.optuna_sweeper)."""

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


# Optuna's samplers as `hydra/sweeper/sampler=<name>` (the names of hydra-optuna-sweeper's), each
# with the arguments of its constructor that take a plain value and exist from optuna 4 on;
# fedlight's default is TPE with seed 0 (`hydra.sweeper.sampler.seed`).


@dataclass
class TPESamplerConf:
    """optuna.samplers.TPESampler (Bergstra et al. 2011); several objectives too (MOTPE)."""

    _target_: str = "optuna.samplers.TPESampler"
    seed: int | None = None
    n_startup_trials: int = 10  # random draws before TPE's own
    n_ei_candidates: int = 24
    multivariate: bool | None = None  # None: Optuna's default
    group: bool = False


@dataclass
class RandomSamplerConf:
    _target_: str = "optuna.samplers.RandomSampler"
    seed: int | None = None


@dataclass
class CmaEsSamplerConf:
    """optuna.samplers.CmaEsSampler (Hansen 2016): one objective, float and int parameters."""

    _target_: str = "optuna.samplers.CmaEsSampler"
    seed: int | None = None
    x0: dict[str, Any] | None = None
    sigma0: float | None = None
    n_startup_trials: int = 1
    consider_pruned_trials: bool = False
    use_separable_cma: bool = False
    with_margin: bool = False
    lr_adapt: bool = False


@dataclass
class NSGAIISamplerConf:
    """optuna.samplers.NSGAIISampler (Deb et al. 2002): a genetic search for several objectives."""

    _target_: str = "optuna.samplers.NSGAIISampler"
    seed: int | None = None
    population_size: int = 50
    mutation_prob: float | None = None
    crossover_prob: float = 0.9
    swapping_prob: float = 0.5


@dataclass
class NSGAIIISamplerConf(NSGAIISamplerConf):
    _target_: str = "optuna.samplers.NSGAIIISampler"
    dividing_parameter: int = 3


@dataclass
class QMCSamplerConf:
    _target_: str = "optuna.samplers.QMCSampler"
    seed: int | None = None
    qmc_type: str = "sobol"
    scramble: bool = False


@dataclass
class GPSamplerConf:
    """optuna.samplers.GPSampler: Bayesian optimization with a Gaussian process (torch, scipy)."""

    _target_: str = "optuna.samplers.GPSampler"
    seed: int | None = None
    n_startup_trials: int = 10
    deterministic_objective: bool = False


@dataclass
class GridSamplerConf:
    """Refused by fedlight's sweeper: a grid is Hydra's basic sweeper."""

    _target_: str = "optuna.samplers.GridSampler"
    _partial_: bool = True  # the grid would be the searched space's values


SAMPLERS: dict[str, type] = {
    "tpe": TPESamplerConf,
    "motpe": TPESamplerConf,  # MOTPESampler was merged into TPESampler (optuna 3.0; gone in 4)
    "random": RandomSamplerConf,
    "cmaes": CmaEsSamplerConf,
    "nsgaii": NSGAIISamplerConf,
    "nsgaiii": NSGAIIISamplerConf,
    "qmc": QMCSamplerConf,
    "gp": GPSamplerConf,
    "grid": GridSamplerConf,
}


@dataclass
class FedlightOptunaSweeperConf:
    """`hydra/sweeper=optuna`: see fedlight/optuna_sweeper.py and docs/tuning.md."""

    _target_: str = "hydra_plugins.fedlight_optuna.FedlightOptunaSweeper"
    defaults: list[Any] = field(default_factory=lambda: [{"sampler": "tpe"}])
    # the sampler's settings over its config's; seed 0: a study draws the same trials each time
    # it is run (a continued study continues the sampler's state)
    sampler: Any = field(default_factory=lambda: {"seed": 0})
    # maximize | minimize, or one per objective; None: each objective's own
    direction: Any = None
    # several summary.json numbers (e.g. [final_accuracy, comm_mb]): a study of several
    # objectives, its result a Pareto front; None: the run's `objective` alone
    objectives: list[str] | None = None
    # an Optuna storage URL (sqlite:///..., postgresql://...), `journal` (Optuna's journal file
    # <sweep dir>/optuna_journal.log) or a journal file's path (*.log); None: <sweep dir>/optuna.db
    storage: Any = None
    study_name: str | None = "fedlight"
    n_trials: int = 20  # the study's trials in all: a continued study runs those it lacks
    n_jobs: int = 1  # trials asked at once (run in parallel by hydra/launcher=joblib)
    max_failure_rate: float = 0.0  # of a batch's jobs that may end in an error
    # Hydra < 1.2's form of `params` (refused: use params)
    search_space: dict[str, Any] | None = None
    params: dict[str, str] | None = None  # the searched overrides: interval(), choice(), range()
    # a function (dotted path) called with (config, trial) to suggest more parameters
    custom_search_space: str | None = None


def register_config() -> None:
    """`hydra/sweeper=optuna` and its samplers, as fedlight's; nothing without optuna (the
    `optuna` extra: fedlight's checks then name it)."""
    if importlib.util.find_spec("optuna") is None:
        return
    # alembic (Optuna's storage) says at INFO how it sets itself up when Hydra imports optuna
    # for the sampler: seven lines in Hydra's log format that tell a user nothing
    logging.getLogger("alembic").setLevel(logging.WARNING)
    store = ConfigStore.instance()
    for name, node in SAMPLERS.items():
        store.store(group="hydra/sweeper/sampler", name=name, node=node, provider="fedlight")
    store.store(
        group="hydra/sweeper",
        name="optuna",
        node=FedlightOptunaSweeperConf,
        provider="fedlight",
    )
