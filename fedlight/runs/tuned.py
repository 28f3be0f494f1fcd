"""`fedlight tuned <study dir>`: the second stage of tuning. A study (`hydra/sweeper=optuna`,
`+experiment/tune=<algo>`) chose an algorithm's hyperparameters on the validation set; this runs
its best configuration again with three seeds on the same setting, with the test set evaluated
every round, into `<study dir>/tested`, so that the number reported is a test accuracy of a
configuration the test set did not choose (as NIID-Bench and Reddi et al. 2021 report theirs).

The command is the study's own (Hydra's record, multirun.yaml) without what made it a study: the
`+experiment/tune` preset (replaced by the algorithm it chose), the searched parameters (replaced
by the best trial's values), the sweeper's settings and `seed`.
"""

from collections.abc import Collection
from pathlib import Path

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

from fedlight.core.errors import ConfigError
from fedlight.runs.recorded_code import vetted
from fedlight.runs.resume import AUTO, recorded_command

RESULTS_FILE = "optimization_results.yaml"  # the study's best trial (fedlight.runs.optuna_sweeper)
TESTED_DIR = "tested"
SEEDS = "0,1,2"
TUNE_PRESET = "experiment/tune"  # the group whose options make a command a study


def tuned_command(study: Path, seeds: str = SEEDS, given: Collection[str] = ()) -> list[str]:
    """The arguments of `python -m fedlight` that test `study`'s best configuration; what of the
    study's records names code to run is refused unless the user's own arguments `given` hold it
    too (`fedlight.runs.recorded_code`)."""
    recorded = recorded_command(study, "tuned", given)
    best = best_params(study)
    parser = OverridesParser.create()

    def study_only(override: str) -> bool:
        key = override.split("=")[0].lstrip("+~")
        parsed = parser.parse_override(override)
        return parsed.is_sweep_override() or key in ("resume", "seed", TUNE_PRESET)

    task = [o for o in recorded.task if not study_only(o)]
    own = [
        o
        for o in recorded.own
        if not o.split("=")[0].startswith(("hydra/sweeper", "hydra.sweeper", "hydra.sweep."))
    ]
    algorithm = (recorded.record.get("runtime") or {}).get("choices", {}).get("algo")
    if algorithm and not any(o.split("=")[0].lstrip("+") == "algo" for o in task):
        task.append(f"algo={algorithm}")
    chosen = [f"{name}={value}" for name, value in best.items()]
    vetted(chosen, study / RESULTS_FILE, given, f"fedlight tuned {study}")
    directory = study / TESTED_DIR
    return [
        *recorded.flags,
        *own,
        *task,
        *chosen,
        f"seed={seeds}",
        f"hydra.sweep.dir={directory}",
        f"resume={AUTO}",
    ]


def best_params(study: Path) -> dict[str, object]:
    """The best trial's parameters from the study's optimization_results.yaml."""
    path = study / RESULTS_FILE
    try:
        results = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(
            f"fedlight tuned {study}: no readable {path} ({error}); give the directory of a "
            "study (hydra/sweeper=optuna), or finish it first: fedlight resume "
            f"{study}"
        ) from None
    best = results.get("best_params")
    if "objectives" in results:  # a study of several objectives: a front, no one best trial
        raise ConfigError(
            f"fedlight tuned {study}: the study weighs {', '.join(results['objectives'])} against "
            "each other, and its result is a Pareto front (fedlight report shows it), not one best "
            "trial; run the front's trial you choose with its parameters and seed=0,1,2"
        )
    if not isinstance(best, dict):
        raise ConfigError(
            f"fedlight tuned {study}: {path} names no best trial (no trial completed); "
            f"continue the study: fedlight resume {study}"
        )
    return best
