"""`hydra/sweeper=optuna`: Hydra's Optuna sweeper (hydra-optuna-sweeper) with a study that
survives its process, for tuning on the validation set (Akiba et al., "Optuna", KDD 2019; TPE:
Bergstra et al., NeurIPS 2011).

Hydra's own sweeper asks Optuna for `n_trials` more trials each time it runs and numbers its jobs
from 0, so a killed study run again writes over its first jobs' directories and runs too many
trials; and a job that returns no number (a fedlight run that diverged) is an error that ends the
study. Run by fedlight's plugin (`hydra_plugins.fedlight_optuna`), the study:
- lives in `<sweep dir>/optuna.db` (SQLite, study `fedlight`) unless `storage` says otherwise;
- has `n_trials` trials in all: run again (`fedlight resume <sweep dir>`, or the command with
  `resume=auto`), it runs only those it lacks, and an interrupted trial again in its own job
  directory (numbered by the trial), where `resume=auto` continues it from its checkpoint;
- keeps its sampler, pickled after each draw in `<sweep dir>/optuna_sampler.pkl` (as Optuna's FAQ
  advises for a reproducible resume), so that a continued study draws what the uninterrupted one
  would have (one trial at a time; with `n_jobs` > 1 the batches after a kill may differ); the
  file is read back by an unpickler that admits only what a sampler of the configured kind is
  made of, so that one planted in the sweep directory runs no code;
- gives a trial whose job diverged, or has no value for the objective, the worst value the
  objective can take (0 for an accuracy: the sampler ranks it last), or records it as failed where
  the objective has no worst (bytes, seconds), and goes on; only a job that ended in an error counts
  against `max_failure_rate`;
- maximizes or minimizes as fedlight's `objective` says unless `direction` is given, and refuses a
  grid sampler (a grid is Hydra's basic sweeper: `optim.lr=0.01,0.03,0.1`), and, before it writes
  anything, a study of another search space in the same storage or of other `fl.rounds`.
"""

import io
import pickle
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna
from hydra.core.utils import JobReturn
from hydra.core.utils import JobStatus as HydraJobStatus
from hydra.types import HydraContext, TaskFunction
from hydra_plugins.hydra_optuna_sweeper._impl import (
    OptunaSweeperImpl,
    create_params_from_overrides,
)
from omegaconf import DictConfig, OmegaConf
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, Trial, TrialState

from fedlight.core.config import OBJECTIVES
from fedlight.core.errors import ConfigError, one_line, require
from fedlight.reports.study_report import AFRESH, study_read
from fedlight.runs.experiment import RESUME_FREE_KEYS
from fedlight.runs.tuned import RESULTS_FILE
from fedlight.store.files import write_bytes, write_text
from fedlight.store.run_files import SAMPLER_FILE, STUDY_FILE, STUDY_NAME
from fedlight.store.sweeps import JobStatus, job_state


class StudySweep:
    """One `-m` command's share of a study: the trials it lacks, run through Hydra's launcher."""

    def __init__(
        self,
        settings: dict[str, Any],
        hydra_context: HydraContext,
        task_function: TaskFunction,
        config: DictConfig,
    ) -> None:
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # fedlight says what it does
        self.impl = OptunaSweeperImpl(**settings)
        self.impl.setup(hydra_context=hydra_context, task_function=task_function, config=config)
        self.launcher = self.impl.launcher  # the launcher Hydra's sweeper set up
        self.config = config
        self.sweep_dir = Path(config.hydra.sweep.dir)
        self.objective = str(config.objective)
        self.directions = directions(settings["direction"], self.objective)

    def sweep(self, arguments: list[str]) -> None:
        impl = self.impl
        impl._process_searchspace_config()
        overrides = [*impl._parse_sweeper_params_config(), *arguments]
        space, fixed = create_params_from_overrides(overrides)
        space = {name: d for name, d in space.items() if name not in fixed}
        if isinstance(impl.sampler, optuna.samplers.GridSampler) or (
            getattr(impl.sampler, "func", None) is optuna.samplers.GridSampler
        ):
            raise ConfigError(
                "hydra/sweeper=optuna with sampler=grid: a grid is Hydra's basic sweeper; drop "
                "hydra/sweeper=optuna and list the values (optim.lr=0.01,0.03,0.1)"
            )
        study = self.open_study(space, fixed)
        self.run_interrupted(study, fixed)
        while (left := impl.n_trials - len(study.trials)) > 0:
            trials = [study.ask() for _ in range(min(left, impl.n_jobs))]
            overrides = impl._configure_trials(trials, space, fixed)  # the sampler draws here
            keep_sampler(study.sampler, self.sweep_dir / SAMPLER_FILE)
            self.run(study, trials, overrides)
        write_results(study, self.sweep_dir / RESULTS_FILE)

    def open_study(self, space: dict[str, BaseDistribution], fixed: dict[str, Any]) -> Any:
        """The sweep directory's study, created or continued; a continuation is refused before
        anything is written (`check_record`). The sweep's record, multirun.yaml as Hydra's basic
        sweeper keeps it (`fedlight resume` reads it), is written once the study is opened."""
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        path = self.sweep_dir.resolve() / STUDY_FILE
        storage = self.impl.storage or f"sqlite:///{path}"
        with study_read(
            self.impl.storage or str(path), f"{AFRESH}, or give another hydra.sweep.dir"
        ):
            study = optuna.create_study(
                study_name=self.impl.study_name or STUDY_NAME,
                storage=storage,
                sampler=self.impl.sampler,
                directions=self.directions,
                load_if_exists=True,
            )
            self.check_record(study, search_record(space, fixed), storage)
            trials = study.trials
        write_text(self.sweep_dir / "multirun.yaml", OmegaConf.to_yaml(self.config))
        if 0 < len(trials) < self.impl.n_trials:  # continued, with draws to come: as it left them
            study.sampler = continued_sampler(study.sampler, self.sweep_dir / SAMPLER_FILE, space)
        done = sum(t.state != TrialState.RUNNING for t in trials)
        say(
            f"optuna study {study.study_name} in {storage}: {done} of {self.impl.n_trials} trials "
            f"done, {self.objective} {self.directions[0]}d"
        )
        return study

    def check_record(self, study: Any, searched: list[str], storage: str) -> None:
        """A new study records its search, objective and `fl.rounds`; a continued one is refused
        where it searched another space, with other fixed settings (those a resume may change
        aside), or ran its trials for other `fl.rounds` (a trial's value is its run's, and a
        finished trial is not run again)."""
        rounds = int(self.config.fl.rounds)
        recorded = study.user_attrs
        if "search" not in recorded:
            study.set_user_attr("search", searched)
            study.set_user_attr("objective", self.objective)
            study.set_user_attr("rounds", rounds)
            return
        require(
            recorded["search"] == searched,
            f"hydra/sweeper=optuna: {storage} holds a study of another search "
            f"({' '.join(recorded['search'])}); give another hydra.sweep.dir, or search as it did",
        )
        ran = recorded.get("rounds", rounds)  # a study begun before fedlight recorded them
        require(
            ran == rounds,
            f"hydra/sweeper=optuna with fl.rounds={rounds}: the study's trials ran {ran} rounds "
            f"each, and a trial's value is its run's; continue it with fl.rounds={ran}, or start "
            "another study (another hydra.sweep.dir)",
        )

    def run_interrupted(self, study: Any, fixed: dict[str, Any]) -> None:
        """Trials a killed command left running, each again in its own job directory."""
        interrupted = [t for t in study.trials if t.state == TrialState.RUNNING]
        if interrupted:
            numbers = ", ".join(str(t.number) for t in interrupted)
            say(f"optuna: trials {numbers} were interrupted; run again in their directories")
        for batch in consecutive(interrupted, self.impl.n_jobs):
            trials = [Trial(study, t._trial_id) for t in batch]
            self.run(study, trials, [trial_overrides(t, fixed) for t in batch])

    def run(self, study: Any, trials: list[Trial], overrides: Sequence[Sequence[str]]) -> None:
        """Launch `trials` as the jobs numbered by the first of them, and tell the study."""
        returns = self.launcher.launch(overrides, initial_job_idx=trials[0].number)
        failed = [ret for ret in returns if ret.status == HydraJobStatus.FAILED]
        for trial, ret in zip(trials, returns, strict=True):
            state, value, note = self.outcome(ret)
            trial.set_user_attr("fedlight", note)
            study.tell(trial, value, state=state)
            best = best_line(study)
            say(f"optuna: trial {trial.number}: {note}{f'; {best}' if best else ''}")
        if failed and len(failed) / len(returns) > self.impl.max_failure_rate:
            failed[0].return_value  # raises the job's own error  # noqa: B018

    def outcome(self, ret: JobReturn) -> tuple[TrialState, float | None, str]:
        """The trial's state and value from its job, and what to say of it."""
        if ret.status == HydraJobStatus.FAILED:
            return TrialState.FAIL, None, "failed (an error; see its error.txt)"
        if ret.return_value is not None:
            value = float(ret.return_value)
            return TrialState.COMPLETE, value, f"{self.objective} {value:.4g}"
        status = job_state(Path(ret.hydra_cfg.hydra.runtime.output_dir)).status
        why = "diverged" if status == JobStatus.DIVERGED else f"no {self.objective}"
        worst = OBJECTIVES[self.objective].worst
        if worst is None:
            return TrialState.FAIL, None, f"{why} (a failed trial: {self.objective} has no worst)"
        return TrialState.COMPLETE, worst, f"{why}: given the worst {self.objective}, {worst}"


def keep_sampler(sampler: optuna.samplers.BaseSampler, path: Path) -> None:
    """The sampler after a draw, pickled whole (its random state with it), written atomically and
    never through a link (fedlight's writer: the sweep directory may be writable by others)."""
    write_bytes(path, pickle.dumps(sampler))


class SamplerUnpickler(pickle.Unpickler):
    """Unpickles only the classes and functions in `allowed`: a sampler file (which anyone who
    can write the sweep directory could replace) never runs code of its choosing."""

    def __init__(self, data: bytes, allowed: set[tuple[str, str]]) -> None:
        super().__init__(io.BytesIO(data))
        self.allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.allowed:
            raise pickle.UnpicklingError(f"it names {module}.{name}, no part of a sampler")
        return super().find_class(module, name)


class NamesRecorder(pickle.Unpickler):
    """Notes the classes and functions a pickle names (one fedlight has just made itself)."""

    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.named: set[tuple[str, str]] = set()

    def find_class(self, module: str, name: str) -> Any:
        self.named.add((module, name))
        return super().find_class(module, name)


def sampler_parts(
    sampler: optuna.samplers.BaseSampler, space: dict[str, BaseDistribution]
) -> set[tuple[str, str]]:
    """What a kept sampler of the configured kind may be made of: the classes and functions a
    pickle of the configured one names (its random states included), and the distributions of
    the searched space (a sampler caches them as it draws)."""
    recorder = NamesRecorder(pickle.dumps(sampler))
    recorder.load()
    return recorder.named | {(type(d).__module__, type(d).__qualname__) for d in space.values()}


def continued_sampler(
    configured: optuna.samplers.BaseSampler, path: Path, space: dict[str, BaseDistribution]
) -> optuna.samplers.BaseSampler:
    """The sampler a continued study draws with: the one its latest draw left in `path` (the
    sweep's own file), if it is of the configured kind and made only of what such a sampler is
    made of (`space`: the searched distributions); else the configured one, reseeded, so that it
    does not repeat the first command's draws."""
    kept, why = None, "none was kept"
    if path.is_file():
        try:
            kept = SamplerUnpickler(path.read_bytes(), sampler_parts(configured, space)).load()
        except Exception as error:  # noqa: BLE001 - cut short, damaged or foreign: draw afresh
            why = f"{path} is not a sampler fedlight kept: {one_line(error, limit=120)}"
        else:
            why = f"it was a {type(kept).__name__}"
    if type(kept) is type(configured):
        say("optuna: the sampler continues from its state after the latest draw")
        return kept
    configured.reseed_rng()
    say(f"optuna: the sampler draws afresh ({why}), not as an uninterrupted study would")
    return configured


def directions(given: Any, objective: str) -> list[str]:
    """The one direction of the study: `direction` where given, else the objective's."""
    if given is None:
        return [OBJECTIVES[objective].direction]
    named = [getattr(d, "name", d) for d in (given if isinstance(given, list) else [given])]
    if len(named) != 1:
        raise ConfigError(
            f"hydra.sweeper.direction={named}: fedlight's objective is one number; give one "
            "direction (maximize or minimize) or none (the objective's)"
        )
    return [str(named[0])]


def search_record(space: dict[str, BaseDistribution], fixed: dict[str, Any]) -> list[str]:
    """The search as the study keeps it: each distribution, and each fixed setting that changes
    a number (those a resume may change left out)."""
    searched = [f"{name}={distribution}" for name, distribution in space.items()]
    kept = [
        f"{name}={value}"
        for name, value in fixed.items()
        if name.lstrip("+~") not in RESUME_FREE_KEYS and not name.startswith("hydra")
    ]
    return sorted(searched) + sorted(kept)


def trial_overrides(trial: FrozenTrial, fixed: dict[str, Any]) -> list[str]:
    """The overrides an interrupted trial runs again with: its drawn parameters, and this
    command's fixed ones (the study's, up to those a resume may change, such as `resume=auto`)."""
    return [f"{name}={value}" for name, value in {**trial.params, **fixed}.items()]


def consecutive(trials: list[FrozenTrial], size: int) -> list[list[FrozenTrial]]:
    """`trials` in batches of consecutive numbers, at most `size` each (one launch numbers its
    jobs from its first)."""
    batches: list[list[FrozenTrial]] = []
    for trial in trials:
        if batches and len(batches[-1]) < size and batches[-1][-1].number == trial.number - 1:
            batches[-1].append(trial)
        else:
            batches.append([trial])
    return batches


def best_line(study: Any) -> str | None:
    """`best 0.8123 (trial 3)`, or None before any trial completed."""
    completed = [t for t in study.trials if t.state == TrialState.COMPLETE]
    if not completed:
        return None
    best = study.best_trial
    return f"best {best.value:.4g} (trial {best.number})"


def write_results(study: Any, path: Path) -> None:
    """Hydra's `optimization_results.yaml`: the best parameters and value, and fedlight's count."""
    states = [t.state for t in study.trials]
    results: dict[str, Any] = {
        "name": "optuna",
        "study": study.study_name,
        "direction": study.direction.name.lower(),
        "trials": len(states),
        "completed": states.count(TrialState.COMPLETE),
        "failed": states.count(TrialState.FAIL),
    }
    if results["completed"]:
        best = study.best_trial
        results |= {"best_params": best.params, "best_value": best.value, "best_trial": best.number}
        say(f"optuna: best {best.value:.4g} (trial {best.number}: {best.params})")
    write_text(path, OmegaConf.to_yaml(OmegaConf.create(results)))


def say(line: str) -> None:
    print(f"fedlight: {line}", file=sys.stderr, flush=True)
