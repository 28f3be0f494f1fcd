"""`hydra/sweeper=optuna`: an Optuna sweeper for Hydra on Optuna's public API (optuna >= 4), with
a study that survives its process, for tuning on the validation set (Akiba et al., "Optuna", KDD
2019; TPE: Bergstra et al., NeurIPS 2011).

It reads the settings of Hydra's Optuna sweeper (hydra-optuna-sweeper) as users type them:
`hydra.sweeper.params` (and the command's own sweep overrides) with `choice()` and `glob()` (a
categorical parameter), `interval(a,b)` (a float; `tag(log, ...)` log scale, `tag(int, ...)` whole
numbers) and `range(a,b,step)` (the values Hydra lists: `b` excluded). Unlike Hydra's sweeper, which
asks Optuna for `n_trials` more trials each time it runs and numbers its jobs from 0 (so a killed
study run again writes over its first jobs' directories and runs too many trials), and for which
a job that returns no number (a fedlight run that diverged) is an error that ends the study, run by
fedlight's plugin (`hydra_plugins.fedlight_optuna`) the study:
- lives in `<sweep dir>/optuna.db` (SQLite, study `fedlight`) unless `storage` says otherwise:
  another URL, or `journal` (Optuna's journal file, `<sweep dir>/optuna_journal.log`, what Optuna
  advises on shared file systems such as NFS) or a journal file's path (`*.log`);
- has `n_trials` trials in all: run again (`fedlight resume <sweep dir>`, or the command with
  `resume=auto`), it runs only those it lacks, and an interrupted trial again in its own job
  directory (numbered by the trial), where `resume=auto` continues it from its checkpoint;
- keeps its sampler's state, the state of each random generator in it, as numbers in
  `<sweep dir>/optuna_sampler.json` after each draw, so that a continued study draws what the
  uninterrupted one would have (one trial at a time; with `n_jobs` > 1 the batches after a kill
  may differ); no pickle: the file is read as JSON numbers into a sampler built from the
  configuration, so one planted in the sweep directory runs no code;
- may be shared by several sweep directories (a journal file or a URL): each trial is marked with
  the sweep directory that runs it, and a sweep runs again only its own interrupted trials;
- has each evaluated round's value reported to its trial by the job (`trial_report.py`: learning
  curves) and, with `hydra/sweeper/pruner`, hopeless trials stopped after a round and told
  pruned;
- gives a trial whose job diverged, or has no value for an objective, the worst value the
  objective can take (0 for an accuracy: the sampler ranks it last), or records it as failed where
  an objective has no worst (bytes, seconds), and goes on; only a job that ended in an error counts
  against `max_failure_rate`;
- optimizes one objective (the run's `objective`) or several (`objectives`, e.g.
  `[final_accuracy, comm_mb]`: its result a Pareto front), each maximized or minimized as the
  objective says unless `direction` is given; refuses a grid sampler (a grid is Hydra's basic
  sweeper: `optim.lr=0.01,0.03,0.1`), and, before it writes anything, a study of another search
  space or other objectives in the same storage, or of other `fl.rounds`.

Beside it: `study_space.py` (the searched space and the fixed settings), `study_settings.py` (the
sweeper's settings: sampler, pruner, objectives, directions, storage), `sampler_state.py` (the
sampler's state as numbers), `trial_report.py` (what a trial's job tells its trial).
"""

import json
import logging
import math
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import optuna
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
from hydra.core.utils import JobStatus as HydraJobStatus
from hydra.types import HydraContext, TaskFunction
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from optuna.distributions import (
    BaseDistribution,
)
from optuna.trial import FrozenTrial, Trial, TrialState

from fedlight.core.errors import one_line, require
from fedlight.core.objectives import OBJECTIVES
from fedlight.reports.study_report import (
    AFRESH,
    NOTE_ATTR,
    PRUNED_ATTR,
    journal_storage,
    study_read,
)
from fedlight.runs.sampler_state import keep_sampler, restore_sampler
from fedlight.runs.study_settings import (
    built_pruner,
    built_sampler,
    directions,
    objectives,
    study_storage,
    typed,
)
from fedlight.runs.study_space import legacy_record, search_record, search_space, trial_overrides
from fedlight.runs.trial_report import numbered, round_value
from fedlight.runs.tuned import RESULTS_FILE
from fedlight.store.files import write_text
from fedlight.store.run_files import SAMPLER_FILE, STUDY_NAME
from fedlight.store.sweeps import JobStatus, job_state

# a trial's user attribute: the sweep directory whose command runs it (several sweeps may share a
# storage, and each runs again only its own interrupted trials)
SWEEP_ATTR = "fedlight.sweep_dir"
Numbered = TypeVar("Numbered", FrozenTrial, Trial)  # a trial of the study, finished or asked


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
        # alembic (Optuna's SQL storage) says at INFO how it sets a new database up: seven lines
        # in Hydra's log format that tell a user nothing
        logging.getLogger("alembic").setLevel(logging.WARNING)
        settings = {k: plain(v) for k, v in settings.items()}
        require(
            settings.get("search_space") is None,
            "hydra.sweeper.search_space is Hydra 1.1's form; give the searched parameters as "
            "hydra.sweeper.params, e.g. "
            "hydra.sweeper.params.optim.lr='tag(log,interval(0.01,0.3))'",
        )
        self.sampler = built_sampler(settings["sampler"])
        self.pruner = built_pruner(settings.get("pruner"))
        self.n_trials = typed(settings, "n_trials", int)
        self.n_jobs = typed(settings, "n_jobs", int)
        self.max_failure_rate = float(typed(settings, "max_failure_rate", float))
        require(
            0.0 <= self.max_failure_rate <= 1.0,
            f"hydra.sweeper.max_failure_rate={self.max_failure_rate} must be from 0 to 1",
        )
        require(self.n_jobs >= 1, f"hydra.sweeper.n_jobs={self.n_jobs} must be >= 1")
        self.params = settings.get("params") or {}
        custom = settings.get("custom_search_space")
        self.custom = instantiate({"_target_": custom, "_partial_": True}) if custom else None
        self.launcher = Plugins.instance().instantiate_launcher(
            config=config, hydra_context=hydra_context, task_function=task_function
        )
        self.parser = OverridesParser.create(config_loader=hydra_context.config_loader)
        self.config = config
        self.sweep_dir = Path(config.hydra.sweep.dir)
        self.objective = str(config.objective)
        self.objectives = objectives(settings.get("objectives"), self.objective)
        self.multi = settings.get("objectives") is not None
        self.directions = directions(settings["direction"], self.objectives)
        judged_rounds(self.pruner, self.objectives, str(config.eval.split))
        self.storage, self.where = study_storage(settings["storage"], self.sweep_dir)
        self.study_name = settings["study_name"] or STUDY_NAME

    def sweep(self, arguments: list[str]) -> None:
        declared = [f"{name}={value}" for name, value in self.params.items()]
        space, fixed = search_space([*declared, *arguments], self.parser)
        study = self.open_study(space, fixed)
        self.run_interrupted(study, fixed)
        while (left := self.n_trials - len(study.trials)) > 0:
            trials = [self.ask(study, space, fixed) for _ in range(min(left, self.n_jobs))]
            keep_sampler(study.sampler, self.sweep_dir / SAMPLER_FILE)
            for batch in consecutive(trials, self.n_jobs):  # another sweep may ask in between
                self.run(study, batch, fixed)
        write_results(study, self.objectives, self.sweep_dir / RESULTS_FILE)
        if isinstance(self.storage, str) or self.where.endswith(".log"):
            url = self.where if self.where.endswith(".log") or "://" in self.where else self.storage
            say(f"optuna: browse the study: optuna-dashboard {url}")

    def ask(self, study: optuna.Study, space: dict[str, BaseDistribution], fixed: dict) -> Trial:
        """A new trial, its parameters drawn by the sampler (the searched space's, in order, then
        those `custom_search_space` suggests), the fixed settings noted on it as Hydra's sweeper
        notes them."""
        trial = study.ask(fixed_distributions=space)
        if self.custom is not None:
            self.custom(self.config, trial)
        clash = sorted(set(trial.params) & set(fixed))
        require(not clash, f"hydra/sweeper=optuna: {', '.join(clash)} both searched and fixed")
        for name, value in fixed.items():
            trial.set_user_attr(name, value)
        trial.set_user_attr(SWEEP_ATTR, str(self.sweep_dir.resolve()))
        return trial

    def open_study(self, space: dict[str, BaseDistribution], fixed: dict[str, Any]) -> Any:
        """The sweep directory's study, created or continued; a continuation is refused before
        anything is written (`check_record`). The sweep's record, multirun.yaml as Hydra's basic
        sweeper keeps it (`fedlight resume` reads it), is written once the study is opened."""
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        kept = self.sweep_dir / SAMPLER_FILE
        require(
            kept.is_file() or not kept.exists() or kept.is_fifo(),
            f"{kept} is a directory, where the study keeps its sampler's state; move it away",
        )
        with study_read(self.where, f"{AFRESH}, or give another hydra.sweep.dir"):
            storage = self.storage
            study = optuna.create_study(
                study_name=self.study_name,
                storage=journal_storage(storage) if isinstance(storage, Path) else storage,
                sampler=self.sampler,
                pruner=self.pruner,
                directions=self.directions,
                load_if_exists=True,
            )
            self.check_record(study, search_record(space, fixed))
            trials = study.trials
        write_text(self.sweep_dir / "multirun.yaml", OmegaConf.to_yaml(self.config))
        if 0 < len(trials) < self.n_trials:  # continued, with draws to come: as it left them
            study.sampler = continued_sampler(study.sampler, self.sweep_dir / SAMPLER_FILE)
        done = sum(t.state != TrialState.RUNNING for t in trials)
        aims = ", ".join(f"{o} {d}d" for o, d in zip(self.objectives, self.directions, strict=True))
        say(
            f"optuna study {study.study_name} in {self.where}: {done} of {self.n_trials} trials "
            f"done, {aims}"
        )
        return study

    def check_record(self, study: Any, searched: list[str]) -> None:
        """A new study records its search, objectives and `fl.rounds`; a continued one is refused
        where it searched another space, with other fixed settings (those a resume may change
        aside), for other objectives or directions, or ran its trials for other `fl.rounds` (a
        trial's value is its run's, and a finished trial is not run again)."""
        rounds = int(self.config.fl.rounds)
        recorded = study.user_attrs
        if "search" not in recorded:
            study.set_user_attr("search", searched)
            study.set_user_attr("objective", self.objectives[0])
            if self.multi:
                study.set_user_attr("objectives", self.objectives)
            study.set_user_attr("rounds", rounds)
            with warnings.catch_warnings():  # experimental in Optuna: names in its dashboard
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                study.set_metric_names(self.objectives)
            return
        storage = self.where
        require(
            recorded["search"] in (searched, legacy_record(searched)),
            f"hydra/sweeper=optuna: {storage} holds a study of another search "
            f"({' '.join(recorded['search'])}); give another hydra.sweep.dir, or search as it did",
        )
        aimed = recorded.get("objectives", [recorded.get("objective", self.objectives[0])])
        was = [d.name.lower() for d in study.directions]
        require(
            (aimed, was) == (self.objectives, self.directions),
            f"hydra/sweeper=optuna: {storage} holds a study of {', '.join(aimed)} "
            f"({', '.join(was)}), not of {', '.join(self.objectives)} "
            f"({', '.join(self.directions)}); give another hydra.sweep.dir, or the same objectives",
        )
        ran = recorded.get("rounds", rounds)  # a study begun before fedlight recorded them
        require(
            ran == rounds,
            f"hydra/sweeper=optuna with fl.rounds={rounds}: the study's trials ran {ran} rounds "
            f"each, and a trial's value is its run's; continue it with fl.rounds={ran}, or start "
            "another study (another hydra.sweep.dir)",
        )

    def run_interrupted(self, study: Any, fixed: dict[str, Any]) -> None:
        """This sweep's trials that a killed command left running, each again in its own job
        directory; another sweep's running trials (a storage shared by several sweep
        directories) are left to it."""
        running = [t for t in study.trials if t.state == TrialState.RUNNING]
        interrupted = [t for t in running if self.owns(t)]
        for trial in running:
            if not self.owns(trial):
                where = trial.user_attrs.get(SWEEP_ATTR, "unmarked: begun by an older fedlight")
                say(f"optuna: trial {trial.number} runs in another sweep ({where}): left to it")
        if interrupted:
            numbers = ", ".join(str(t.number) for t in interrupted)
            say(f"optuna: trials {numbers} were interrupted; run again in their directories")
        for batch in consecutive(interrupted, self.n_jobs):
            self.run(study, batch, fixed)

    def owns(self, trial: FrozenTrial) -> bool:
        """Whether a running trial is this sweep's, left by a killed command (one command at a
        time holds a sweep directory's lock): marked with this sweep directory, or, in a storage
        in this sweep directory, unmarked (begun before fedlight marked its trials) or marked
        with a directory that is no more (the sweep directory was moved)."""
        marked = trial.user_attrs.get(SWEEP_ATTR)
        if marked == str(self.sweep_dir.resolve()):
            return True
        own_storage = (
            "://" not in self.where and Path(self.where).parent == self.sweep_dir.resolve()
        )
        return own_storage and (marked is None or not Path(str(marked)).is_dir())

    def run(self, study: Any, trials: Sequence[FrozenTrial | Trial], fixed: dict[str, Any]) -> None:
        """Launch `trials` (consecutive numbers) as the jobs numbered by the first of them, and
        tell the study each one's outcome."""
        numbers = [t.number for t in trials]
        overrides = [trial_overrides(t.params, fixed) for t in trials]
        returns = self.launcher.launch(overrides, initial_job_idx=numbers[0])
        failed = [ret for ret in returns if ret.status == HydraJobStatus.FAILED]
        for number, ret in zip(numbers, returns, strict=True):
            trial = numbered(study, number)
            ended = ret.status != HydraJobStatus.FAILED
            state, values, note = (ended and pruned(trial, self.objective)) or self.outcome(ret)
            told = tell(study, trial, state, values, note)
            best = best_line(study)
            say(f"optuna: trial {number}: {told}{f'; {best}' if best else ''}")
        if failed and len(failed) / len(returns) > self.max_failure_rate:
            failed[0].return_value  # raises the job's own error  # noqa: B018

    def outcome(self, ret: JobReturn) -> tuple[TrialState, list[float] | None, str]:
        """The trial's state and values from its job, and what to say of it."""
        if ret.status == HydraJobStatus.FAILED:
            return TrialState.FAIL, None, "failed (an error; see its error.txt)"
        state = job_state(Path(ret.hydra_cfg.hydra.runtime.output_dir))
        if self.multi:
            diverged = state.status == JobStatus.DIVERGED
            summary = {} if diverged else (state.summary or {})
            found = [summary.get(o) for o in self.objectives]
        else:  # the job's return value: its `objective`
            diverged = ret.return_value is None and state.status == JobStatus.DIVERGED
            found = [ret.return_value]
        if all(is_number(v) for v in found):
            values = [float(v) for v in found]
            said = ", ".join(f"{o} {v:.4g}" for o, v in zip(self.objectives, values, strict=True))
            return TrialState.COMPLETE, values, said
        lacking = [o for o, v in zip(self.objectives, found, strict=True) if not is_number(v)]
        why = "diverged" if diverged else f"no {', '.join(lacking)}"
        worst = [OBJECTIVES[o].worst if o in OBJECTIVES else None for o in self.objectives]
        unbounded = [o for o, w in zip(self.objectives, worst, strict=True) if w is None]
        if unbounded:
            return TrialState.FAIL, None, f"{why} (a failed trial: {unbounded[0]} has no worst)"
        given = ", ".join(f"{o}, {w}" for o, w in zip(self.objectives, worst, strict=True))
        return TrialState.COMPLETE, worst, f"{why}: given the worst {given}"  # type: ignore[return-value]


def pruned(trial: FrozenTrial, objective: str) -> tuple[TrialState, None, str] | None:
    """A trial whose run the study's pruner stopped (`fedlight.runs.trial_report` marked it):
    pruned (Optuna gives it its last reported value); None for any other."""
    at_round = trial.user_attrs.get(PRUNED_ATTR)
    if at_round is None:
        return None
    value = trial.intermediate_values.get(at_round)
    said = "" if value is None else f" ({objective} {value:.4g})"
    return TrialState.PRUNED, None, f"pruned at round {at_round}{said}"


def judged_rounds(pruner: optuna.pruners.BasePruner, aims: list[str], split: str) -> None:
    """A pruner judges a trial by each evaluated round's value of the study's one objective:
    refused in one line for several objectives, or one without a value per round."""
    if isinstance(pruner, optuna.pruners.NopPruner):
        return
    name = f"hydra/sweeper/pruner ({type(pruner).__name__})"
    drop = "or drop the pruner (hydra/sweeper/pruner=none)"
    require(
        len(aims) == 1,
        f"{name} judges a trial by each round's value of one objective; a study of several "
        f"(hydra.sweeper.objectives={aims}) has none: study one objective, {drop}",
    )
    require(
        round_value(aims[0], split) is not None,
        f"{name} judges a trial by each round's value of its objective; objective={aims[0]} "
        f"is a run's total, with none per round: prune on an accuracy (objective=best_accuracy), "
        f"{drop}",
    )


def tell(
    study: Any, trial: FrozenTrial, state: TrialState, values: list[float] | None, note: str
) -> str:
    """Tell the study `trial`'s outcome, noted on the trial (what `fedlight report` says of
    it), and what to say of it: a trial that is finished already (told by another process
    sharing the storage) keeps what it was told, said in one line."""
    if trial.state.is_finished():
        return (
            f"{note}; not told: the study has it {trial.state.name.lower()} already (another "
            "process sharing its storage told it)"
        )
    optuna.trial.Trial(study, trial._trial_id).set_user_attr(NOTE_ATTR, note)  # opened by id
    study.tell(trial.number, values, state=state, skip_if_finished=True)  # a race lost: as above
    return note


def plain(value: Any) -> Any:
    """A setting as Python values (Hydra hands lists and dicts over as OmegaConf's)."""
    if OmegaConf.is_config(value):
        return OmegaConf.to_container(value, resolve=True)
    return value


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def consecutive(trials: list[Numbered], size: int) -> list[list[Numbered]]:
    """`trials` in batches of consecutive numbers, at most `size` each (one launch numbers its
    jobs from its first, and a job finds its trial by its number)."""
    batches: list[list[Numbered]] = []
    for trial in trials:
        if batches and len(batches[-1]) < size and batches[-1][-1].number == trial.number - 1:
            batches[-1].append(trial)
        else:
            batches.append([trial])
    return batches


# The sampler's state, kept as numbers (`fedlight.runs.sampler_state`) --------------------------


def continued_sampler(configured: optuna.samplers.BaseSampler, path: Path) -> Any:
    """The sampler a continued study draws with: the configured one with the random states its
    latest draw left in `path` (the sweep's own file), where they are a sampler of the configured
    kind's; else the configured one, reseeded, so that it does not repeat the first command's
    draws."""
    why = "none was kept"
    if path.is_file():
        try:
            restore_sampler(configured, json.loads(path.read_bytes()))
        except Exception as error:  # noqa: BLE001 - cut short, damaged or foreign: draw afresh
            why = f"{path} is not a sampler's state fedlight kept: {one_line(error, limit=120)}"
        else:
            say("optuna: the sampler continues from its state after the latest draw")
            return configured
    configured.reseed_rng()
    say(f"optuna: the sampler draws afresh ({why}), not as an uninterrupted study would")
    return configured


# What the study says ---------------------------------------------------------------------------


def best_line(study: Any) -> str | None:
    """`best 0.8123 (trial 3)` (one objective) or `Pareto front: trials 0, 3` (several), or None
    before any trial completed."""
    if not any(t.state == TrialState.COMPLETE for t in study.trials):
        return None
    if len(study.directions) > 1:
        front = sorted(t.number for t in study.best_trials)
        return f"Pareto front: trial{'s' if len(front) > 1 else ''} {', '.join(map(str, front))}"
    best = study.best_trial
    return f"best {best.value:.4g} (trial {best.number})"


def write_results(study: Any, aims: list[str], path: Path) -> None:
    """Hydra's `optimization_results.yaml`: the best parameters and value (one objective) or the
    Pareto front (several: `solutions`, as Hydra's sweeper writes it), and fedlight's count."""
    states = [t.state for t in study.trials]
    results: dict[str, Any] = {"name": "optuna", "study": study.study_name}
    if len(aims) == 1:
        results["direction"] = study.direction.name.lower()
    else:
        results |= {"objectives": aims, "directions": [d.name.lower() for d in study.directions]}
    results |= {
        "trials": len(states),
        "completed": states.count(TrialState.COMPLETE),
        "failed": states.count(TrialState.FAIL),
        "pruned": states.count(TrialState.PRUNED),
    }
    if results["completed"] and len(aims) == 1:
        best = study.best_trial
        results |= {"best_params": best.params, "best_value": best.value, "best_trial": best.number}
        say(f"optuna: best {best.value:.4g} (trial {best.number}: {best.params})")
    elif results["completed"]:
        front = sorted(study.best_trials, key=lambda t: t.number)
        results["solutions"] = [
            {
                "trial": t.number,
                "params": t.params,
                "values": dict(zip(aims, t.values, strict=True)),
            }
            for t in front
        ]
        say(f"optuna: Pareto front of {', '.join(aims)}: {len(front)} trials")
        for t in front:
            values = ", ".join(f"{o} {v:.4g}" for o, v in zip(aims, t.values, strict=True))
            say(f"optuna:   trial {t.number}: {values} ({t.params})")
    write_text(path, OmegaConf.to_yaml(OmegaConf.create(results)))


def say(line: str) -> None:
    print(f"fedlight: {line}", file=sys.stderr, flush=True)
