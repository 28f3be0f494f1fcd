"""A job of fedlight's Optuna sweeper (`hydra/sweeper=optuna`) is a trial of its study: from the
job's Hydra config, the logger that reports each round's value to the trial and lets the study's
pruner stop the run (`fedlight.runs.trial_report`)."""

from dataclasses import replace
from pathlib import Path

from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from fedlight.core.settings import RunSettings
from fedlight.runs.job import Job
from fedlight.runs.trial_report import StudyTrial, TrialReporter, round_value
from fedlight.store.run_files import STUDY_NAME

# fedlight's sweeper (hydra_plugins/fedlight_optuna), as Hydra's config names it
OPTUNA_SWEEPER = "hydra_plugins.fedlight_optuna.FedlightOptunaSweeper"


def with_trial_reporter(job: Job, hydra_cfg: DictConfig) -> Job:
    """`job` with its trial's reporter among its loggers, where it is a trial."""
    reporter = trial_reporter(hydra_cfg, job.settings)
    return job if reporter is None else replace(job, loggers=[*job.loggers, reporter])


def trial_reporter(hydra_cfg: DictConfig, settings: RunSettings) -> TrialReporter | None:
    """The reporter of the trial this job is (its number the job's); None for a job of another
    sweeper, of a study of several objectives (Optuna keeps no round values for those), or of an
    objective without a value per round (bytes, seconds)."""
    sweeper = hydra_cfg.sweeper
    if hydra_cfg.mode != RunMode.MULTIRUN or sweeper.get("_target_") != OPTUNA_SWEEPER:
        return None
    found = round_value(settings.objective, settings.eval.split)
    if found is None or sweeper.get("objectives") is not None:
        return None
    from fedlight.runs.study_settings import built_pruner, study_storage  # optuna: trials only

    given = OmegaConf.to_container(sweeper, resolve=True)
    assert isinstance(given, dict)
    storage, _ = study_storage(given.get("storage"), Path(str(hydra_cfg.sweep.dir)))
    trial = StudyTrial(
        str(storage),
        str(given.get("study_name") or STUDY_NAME),
        int(hydra_cfg.job.num),
        built_pruner(given.get("pruner")),
    )
    return TrialReporter(trial, settings.objective, *found)
