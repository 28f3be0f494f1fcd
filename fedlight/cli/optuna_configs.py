"""The configs of fedlight's `hydra/sweeper=optuna` (the plugin `hydra_plugins.fedlight_optuna`,
its work in fedlight/runs/optuna_sweeper.py) and of its samplers, stored by the entry point over
those of another Optuna sweeper (`register_config`)."""

import importlib.util
import logging
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore

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
    """`hydra/sweeper=optuna`: see fedlight/runs/optuna_sweeper.py and docs/tuning.md."""

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
