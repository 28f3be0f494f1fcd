"""`hydra/sweeper=optuna` as fedlight runs it (fedlight/runs/optuna_sweeper.py, on optuna >= 4): a
study kept in the sweep directory that continues after a kill without running finished trials
again, with its sampler's state; a diverged trial given the worst value while the study goes on;
studies of several objectives with their Pareto front; Optuna's journal storage; optuna-dashboard
on a study; and the refusals."""

import csv
import json
import os
import pickle
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
import yaml
from omegaconf import OmegaConf

from fedlight.cli.validate import group_options
from fedlight.core.errors import ConfigError
from fedlight.reports.cli import main as report_main
from fedlight.reports.study_report import NOTE_ATTR, load_study
from fedlight.runs.optuna_sweeper import consecutive, continued_sampler
from fedlight.runs.resume import resume_command
from fedlight.runs.sampler_state import keep_sampler
from fedlight.runs.study_settings import directions, objectives
from fedlight.runs.study_space import distribution, legacy_record, search_record, trial_overrides
from fedlight.runs.tuned import tuned_command
from fedlight.store.run_files import JOURNAL_FILE, SAMPLER_FILE, STUDY_FILE
from fedlight.store.sweeps import JobStatus, job_state, sweep_states
from tests.conftest import TINY, compose_config, run_cli
from tests.helpers.commands import validate_command_line
from tests.runs.test_hardening import RunsCode
from tests.runs.test_sweep_resume import snapshot, started, wait_for

SMALL = [o for o in TINY if not o.startswith("fl.rounds=")]
STUDY = [
    "-m",
    "hydra/sweeper=optuna",
    "hydra.sweeper.n_trials=3",
    "optim.lr=tag(log,interval(0.01,0.3))",
    *SMALL,
    "data.validation_fraction=0.2",
    "eval.split=validation",
    "objective=best_accuracy",
]


def trials(sweep: Path) -> list[optuna.trial.FrozenTrial]:
    return study_of(sweep).trials


def study_of(sweep: Path) -> optuna.Study:
    if (sweep / JOURNAL_FILE).is_file():
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        storage = JournalStorage(JournalFileBackend(str(sweep / JOURNAL_FILE)))
        return optuna.load_study(study_name="fedlight", storage=storage)
    return optuna.load_study(study_name="fedlight", storage=f"sqlite:///{sweep / STUDY_FILE}")


def best_so_far(job: Path) -> dict[int, float]:
    """`best_accuracy` round by round, from the job's metrics.csv (its validation accuracy)."""
    with (job / "metrics.csv").open() as rows:
        accuracies = [(int(r["round"]), float(r["val_accuracy"])) for r in csv.DictReader(rows)]
    return {n: max(a for _, a in accuracies[: i + 1]) for i, (n, _) in enumerate(accuracies)}


def kill_half_way(study: list[str], sweep: Path, tmp_path: Path) -> None:
    """Start a 16-round study into `sweep` and kill its process group (SIGKILL) with trial 0
    finished and trial 1 half-way."""
    process = started([*study, "fl.rounds=16", f"hydra.sweep.dir={sweep}"], tmp_path)

    def half_way() -> bool:
        return job_state(sweep / "0").done and 3 <= job_state(sweep / "1").rounds_logged <= 12

    wait_for(half_way, process, "trial 0 finished and trial 1 half-way")
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def test_a_killed_study_continues_where_it_stopped(tmp_path: Path) -> None:
    """SIGKILL once trial 0 finished and trial 1 is half-way: `fedlight resume` leaves trial 0's
    files as they are, continues trial 1 in its own directory from its checkpoint (its drawn
    learning rate kept) and runs trial 2 only: three trials, each with its job's value, and the
    same draws and values as the study run without a kill."""
    sweep = tmp_path / "study"
    kill_half_way(STUDY, sweep, tmp_path)
    first = snapshot(sweep / "0")
    before = trials(sweep)
    assert [t.state.name for t in before] == ["COMPLETE", "RUNNING"]
    assert job_state(sweep / "1").status is JobStatus.STOPPED

    resumed = run_cli("resume", str(sweep), cwd=tmp_path)

    assert "trials 1 were interrupted" in resumed.stderr
    assert "the sampler continues from its state after the latest draw" in resumed.stderr
    assert snapshot(sweep / "0") == first
    after = trials(sweep)
    assert [t.state.name for t in after] == ["COMPLETE"] * 3
    assert after[1].params == before[1].params
    states = sweep_states(sweep)
    assert [s.directory.name for s in states] == ["0", "1", "2"]
    assert [s.summary["resumes"] for s in states] == [0, 1, 0]
    assert [t.value for t in after] == [s.summary["best_accuracy"] for s in states]
    # each round's value reported once to its trial, the resumed trial's replayed rounds too
    assert [t.intermediate_values for t in after] == [best_so_far(s.directory) for s in states]
    overrides = yaml.safe_load((sweep / "1" / ".hydra" / "overrides.yaml").read_text())
    assert f"optim.lr={before[1].params['optim.lr']}" in overrides
    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert (results["trials"], results["completed"]) == (3, 3)
    assert results["best_value"] == max(t.value for t in after)

    # the study's report: best parameters, every trial, the plot
    assert report_main([str(sweep)]) == 0
    report = (sweep / "report.md").read_text()
    best = max(after, key=lambda t: t.value)
    assert f"Best: **{best.value:.4f}** in trial {best.number} (job {best.number})" in report
    assert report.count("\n| 1 | ") == 1 and "3 trials: 3 completed, 0 failed" in report
    assert (sweep / "study.png").stat().st_size > 0

    whole = tmp_path / "whole"
    run_cli(*STUDY, "fl.rounds=16", f"hydra.sweep.dir={whole}", cwd=tmp_path)
    uninterrupted = trials(whole)
    assert [t.params for t in after] == [t.params for t in uninterrupted]
    assert [t.value for t in after] == [t.value for t in uninterrupted]


def test_a_diverged_trial_gets_the_worst_value_and_the_study_goes_on(tmp_path: Path) -> None:
    """Every learning rate of this space diverges: each trial is given accuracy 0 (not an error
    that ends the study) and the study runs its trials; continued with another space, refused."""
    sweep = tmp_path / "study"
    study = [*STUDY[:3], "optim.lr=interval(1e5,1e6)", *STUDY[4:], "fl.rounds=2"]
    run_cli(*study, f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    done = trials(sweep)
    assert [(t.state.name, t.value) for t in done] == [("COMPLETE", 0.0)] * 3
    notes = [t.user_attrs[NOTE_ATTR] for t in done]  # what happened to each trial
    assert all(note.startswith("diverged: given the worst best_accuracy, 0.0") for note in notes)
    assert {s.status for s in sweep_states(sweep)} == {JobStatus.DIVERGED}

    other = [*study[:3], "optim.lr=interval(0.01,0.3)", *study[4:], "resume=auto"]
    refused = run_cli(*other, f"hydra.sweep.dir={sweep}", cwd=tmp_path, check=False)
    assert refused.returncode == 2
    assert (
        refused.stderr.strip()
        .splitlines()[-1]
        .startswith("fedlight: error: hydra/sweeper=optuna: ")
    )
    assert "holds a study of another search (optim.lr=FloatDistribution" in refused.stderr

    # the second stage: the best trial's configuration with three seeds, the test set each round
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())["best_params"]
    command = tuned_command(sweep)
    assert f"optim.lr={best['optim.lr']}" in command and "seed=0,1,2" in command
    assert f"hydra.sweep.dir={sweep / 'tested'}" in command
    assert not any(
        "interval(" in o or o.startswith(("hydra/sweeper", "hydra.sweeper")) for o in command
    )
    assert len(validate_command_line(command)) == 3


@pytest.mark.parametrize("setting", ["niid_bench", "fedavg_vs_scaffold"])
def test_the_tune_presets_compose_for_each_algorithm(setting: str) -> None:
    """Each algorithm's study on each tuning setting: the algorithm, fedlight's Optuna sweeper, a
    validation set that picks the best round, and the papers' search space checked at every
    value it can take."""
    algorithms = group_options("experiment/tune")
    assert set(algorithms) == {"fedavg", "fedprox", "scaffold", "fednova", "fedadam", "fedyogi"}
    for algorithm in algorithms:
        command = ["-m", f"+experiment/tuning={setting}", f"+experiment/tune={algorithm}"]
        probes = validate_command_line(command)
        cfg = compose_config(probes[0])
        assert cfg.hydra.runtime.choices.algo == algorithm
        assert cfg.hydra.sweeper._target_.endswith("FedlightOptunaSweeper")
        assert cfg.data.validation_fraction > 0 and cfg.eval.split == "validation"
        assert cfg.objective == "best_accuracy" and cfg.eval.test == "final"
        searched = {p.split("=")[0] for job in probes for p in job if "=" in p}
        extra = {"fedprox": "algo.mu", "fedadam": "algo.server_lr", "fedyogi": "algo.server_lr"}
        assert {"optim.lr", extra.get(algorithm, "optim.lr")} <= searched, algorithm


def test_the_direction_is_the_objectives_unless_given() -> None:
    assert directions(None, ["best_accuracy"]) == ["maximize"]
    assert directions(None, ["comm_mb"]) == ["minimize"]
    assert directions("minimize", ["best_accuracy"]) == ["minimize"]
    assert directions(None, ["final_accuracy", "comm_mb"]) == ["maximize", "minimize"]
    assert directions(["minimize", "minimize"], ["val_accuracy", "comm_mb"]) == ["minimize"] * 2
    with pytest.raises(ConfigError, match="one direction each"):
        directions(["maximize", "minimize"], ["best_accuracy"])
    with pytest.raises(ConfigError, match="upwards is not maximize or minimize"):
        directions("upwards", ["best_accuracy"])
    # a logged column (`objective=test_loss`): its way is the study's to be told
    assert directions("minimize", ["test_loss"]) == ["minimize"]
    with pytest.raises(
        ConfigError,
        match=r"objective=test_loss is not a summary\.json number; a column .*direction=minimize",
    ):
        directions(None, ["test_loss"])
    assert objectives(None, "best_accuracy") == ["best_accuracy"]
    assert objectives(["final_accuracy", "comm_mb"], "x") == ["final_accuracy", "comm_mb"]
    with pytest.raises(ConfigError, match=r"accuracy is not a summary\.json number"):
        objectives(["accuracy", "comm_mb"], "final_accuracy")


@pytest.mark.parametrize(
    ("aims", "summary", "expected"),
    [
        (
            ["best_accuracy", "comm_mb"],
            {"best_accuracy": 0.5, "comm_mb": 2.0},
            ("COMPLETE", [0.5, 2.0]),
        ),
        (["best_accuracy", "comm_mb"], {"diverged_at_round": 2, "comm_mb": 1.0}, ("FAIL", None)),
        (["best_accuracy", "val_accuracy"], {"diverged_at_round": 2}, ("COMPLETE", [0.0, 0.0])),
        (["best_accuracy", "comm_mb"], {"best_accuracy": 0.5}, ("FAIL", None)),
        (
            ["best_accuracy", "comm_mb"],
            {"best_accuracy": float("nan"), "comm_mb": 2.0},
            ("FAIL", None),
        ),
    ],
)
def test_a_trial_of_several_objectives_takes_its_values_from_its_summary(
    tmp_path: Path, aims: list[str], summary: dict, expected: tuple
) -> None:
    """Each objective's value is the job's summary.json number; a diverged job, or one lacking a
    value, gets each objective's worst where every objective has one, and fails otherwise
    (`comm_mb` has no worst: a diverged run's megabytes would put it on the front)."""
    from hydra.core.utils import JobStatus as HydraJobStatus

    from fedlight.runs.optuna_sweeper import StudySweep

    (tmp_path / "summary.json").write_text(json.dumps(summary))
    sweep = object.__new__(StudySweep)
    sweep.objectives, sweep.multi = aims, True
    runtime = SimpleNamespace(output_dir=str(tmp_path))
    ret = SimpleNamespace(
        status=HydraJobStatus.COMPLETED,
        return_value=None,
        hydra_cfg=SimpleNamespace(hydra=SimpleNamespace(runtime=runtime)),
    )
    state, values, _ = sweep.outcome(ret)  # type: ignore[arg-type]
    assert (state.name, values) == expected


def sweeper_config(*overrides: str) -> dict:
    """`hydra.sweeper` as fedlight's YAMLs compose it with these overrides (the sampler unbuilt,
    as the sweeper receives it)."""
    from hydra import compose, initialize_config_dir

    from fedlight.cli.schema import CONF_DIR, register_configs

    register_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        config = compose("config", ["hydra/sweeper=optuna", *overrides], return_hydra_config=True)
    return OmegaConf.to_container(config.hydra.sweeper, resolve=True)  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("tpe", optuna.samplers.TPESampler),
        ("motpe", optuna.samplers.TPESampler),
        ("random", optuna.samplers.RandomSampler),
        ("cmaes", optuna.samplers.CmaEsSampler),
        ("nsgaii", optuna.samplers.NSGAIISampler),
        ("nsgaiii", optuna.samplers.NSGAIIISampler),
        ("qmc", optuna.samplers.QMCSampler),
        ("gp", optuna.samplers.GPSampler),
    ],
)
def test_each_sampler_yaml_builds_its_optuna_sampler_with_the_sweepers_seed(
    name: str, kind: type
) -> None:
    """Every `hydra/sweeper/sampler=<name>` names arguments the installed optuna takes, and the
    sweeper's `sampler.seed: 0` (and a user's setting) reaches the sampler."""
    from fedlight.runs.study_settings import built_sampler

    config = sweeper_config(f"hydra/sweeper/sampler={name}", "hydra.sweeper.sampler.seed=7")
    assert config["_recursive_"] is False and config["sampler"]["seed"] == 7
    assert type(built_sampler(config["sampler"])) is kind
    assert sweeper_config(f"hydra/sweeper/sampler={name}")["sampler"]["seed"] == 0


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("hydra.sweeper.n_trials=many", r"^hydra\.sweeper\.n_trials='many' must be an integer$"),
        ("hydra.sweeper.max_failure_rate=x", r"^hydra\.sweeper\.max_failure_rate='x' must be a nu"),
        (
            "hydra.sweeper.sampler.n_startup_trials=ten",
            r"^hydra\.sweeper\.sampler\.n_startup_trials='ten' must be a number, a boolean",
        ),
        ("+hydra.sweeper.sampler.warp=1", r"^hydra\.sweeper\.sampler: .*warp"),
    ],
)
def test_a_sweeper_setting_of_the_wrong_type_is_one_line(override: str, message: str) -> None:
    """YAML types nothing: the sweeper checks its settings and the sampler's as it starts."""
    from fedlight.runs.optuna_sweeper import StudySweep

    with pytest.raises(ConfigError, match=message) as refused:
        StudySweep(sweeper_config(override), None, None, None)  # type: ignore[arg-type]
    assert "\n" not in str(refused.value)


def test_a_grid_sampler_and_hydra_1_1s_search_space_are_refused_in_one_line() -> None:
    from fedlight.runs.optuna_sweeper import StudySweep

    grid = sweeper_config("hydra/sweeper/sampler=grid")
    with pytest.raises(ConfigError, match=r"sampler=grid: a grid is Hydra's basic sweeper"):
        StudySweep(grid, None, None, None)  # type: ignore[arg-type]
    old = {"sampler": {}, "search_space": {"optim.lr": {"type": "float"}}}
    with pytest.raises(ConfigError, match=r"search_space is Hydra 1\.1's form; .*params"):
        StudySweep(old, None, None, None)  # type: ignore[arg-type]


def suggest_momentum(config: object, trial: optuna.Trial) -> None:
    """A `custom_search_space` function, as Hydra's Optuna sweeper calls it."""
    trial.suggest_categorical("optim.momentum", [0.0, 0.9])


def test_custom_search_space_adds_its_parameters_to_each_trial(tmp_path: Path) -> None:
    """...and each trial is marked with the fixed settings and the sweep directory that runs it
    (a storage may be shared by several)."""
    from fedlight.runs.optuna_sweeper import SWEEP_ATTR, StudySweep
    from fedlight.runs.study_space import search_space

    sweep = object.__new__(StudySweep)
    sweep.custom, sweep.config, sweep.sweep_dir = suggest_momentum, None, tmp_path
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    space, fixed = search_space(["optim.lr=tag(log,interval(0.01,0.3))", "algo=fedprox"])
    trial = sweep.ask(study, space, fixed)
    assert set(trial.params) == {"optim.lr", "optim.momentum"}
    assert trial.user_attrs == {"algo": "fedprox", SWEEP_ATTR: str(tmp_path.resolve())}
    assert trial_overrides(trial.params, fixed)[-1] == "algo=fedprox"


def test_interrupted_trials_run_again_in_batches_of_consecutive_numbers() -> None:
    numbered = [SimpleNamespace(number=n) for n in (3, 4, 5, 7, 8)]
    batches = consecutive(numbered, 2)  # type: ignore[arg-type]
    assert [[t.number for t in b] for b in batches] == [[3, 4], [5], [7, 8]]


def test_the_search_record_leaves_out_what_a_resume_may_change() -> None:
    space = {"optim.lr": optuna.distributions.FloatDistribution(0.01, 0.3, log=True)}
    fixed = {"algo": "fedprox", "resume": "auto", "fl.workers": 2, "hydra.sweep.dir": "x"}
    record = search_record(space, fixed)
    assert record == [
        "optim.lr=FloatDistribution(high=0.3, log=True, low=0.01, step=None)",
        "algo=fedprox",
    ]
    # a study begun under optuna 2 (hydra-optuna-sweeper) recorded its classes: it continues
    assert legacy_record(record) == [
        "optim.lr=LogUniformDistribution(high=0.3, low=0.01)",
        "algo=fedprox",
    ]
    continued = trial_overrides({"optim.lr": 0.05}, {"algo": "fedprox", "resume": "auto"})
    assert continued == ["optim.lr=0.05", "algo=fedprox", "resume=auto"]


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (
            "optim.lr=tag(log,interval(0.01,0.3))",
            "FloatDistribution(high=0.3, log=True, low=0.01, step=None)",
        ),
        (
            "optim.lr=interval(0.01,0.3)",
            "FloatDistribution(high=0.3, log=False, low=0.01, step=None)",
        ),
        (
            "algo.mu=interval(1,5)",
            "FloatDistribution(high=5.0, log=False, low=1.0, step=None)",
        ),
        (
            "algo.server_lr=tag(log,interval(16,256))",
            "FloatDistribution(high=256.0, log=True, low=16.0, step=None)",
        ),
        ("local.epochs=range(1,5)", "IntDistribution(high=4, log=False, low=1, step=1)"),
        ("local.epochs=range(1,9,2)", "IntDistribution(high=7, log=False, low=1, step=2)"),
        (
            "optim.momentum=range(0.0,1.0,0.25)",
            "FloatDistribution(high=0.75, log=False, low=0.0, step=0.25)",
        ),
        ("algo=choice(fedavg,fedprox)", "CategoricalDistribution(choices=('fedavg', 'fedprox'))"),
        ("optim.momentum=choice(0.0,0.9)", "CategoricalDistribution(choices=(0.0, 0.9))"),
    ],
)
def test_hydra_optuna_sweepers_syntax_is_the_same_space(override: str, expected: str) -> None:
    """What users of Hydra's Optuna sweeper type: interval (a float, as Hydra parses it and its
    Optuna sweeper drew it; log tagged), choice, and range as Hydra lists it (ints where they
    are; its stop excluded, as the checks before a study try it)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    (parsed,) = OverridesParser.create().parse_overrides([override])
    assert str(distribution(parsed)) == expected


SAMPLERS = {
    "tpe": lambda: optuna.samplers.TPESampler(seed=0, n_startup_trials=2),
    "random": lambda: optuna.samplers.RandomSampler(seed=0),
    "nsgaii": lambda: optuna.samplers.NSGAIISampler(seed=0, population_size=2),
    "tpe, two objectives": lambda: optuna.samplers.TPESampler(seed=0, n_startup_trials=2),
}


@pytest.mark.parametrize("kind", SAMPLERS)
def test_a_continued_study_draws_what_the_uninterrupted_one_draws(
    tmp_path: Path, kind: str
) -> None:
    """The sampler's state kept after each draw (JSON numbers), then restored into a sampler
    built afresh for a new study object (a new process's): the six trials equal an
    uninterrupted study's; without the kept state, they do not."""
    two = kind in ("nsgaii", "tpe, two objectives")

    def study(name: str) -> optuna.Study:
        storage = f"sqlite:///{tmp_path / name}.db"
        return optuna.create_study(
            study_name="fedlight",
            storage=storage,
            sampler=SAMPLERS[kind](),
            directions=["maximize", "minimize"] if two else ["maximize"],
            load_if_exists=True,
        )

    def draw(study: optuna.Study, kept: Path) -> None:
        trial = study.ask()
        lr = trial.suggest_float("lr", 1e-3, 1.0, log=True)
        mu = trial.suggest_categorical("mu", [0.0, 0.1, 1.0])
        keep_sampler(study.sampler, kept)
        fit = -((lr - 0.05) ** 2) - mu
        study.tell(trial, [fit, lr] if two else fit)

    whole = study("whole")
    for _ in range(6):
        draw(whole, tmp_path / "whole.json")
    for name, kept in (("killed", tmp_path / "killed.json"), ("lost", tmp_path / "lost.json")):
        first = study(name)
        for _ in range(3):
            draw(first, kept)
        if name == "lost":
            kept.unlink()
        continued = study(name)
        continued.sampler = continued_sampler(continued.sampler, kept)
        for _ in range(3):
            draw(continued, kept)
        same = [t.params for t in continued.trials] == [t.params for t in whole.trials]
        assert same is (name == "killed")
    assert json.loads((tmp_path / "whole.json").read_text())["random_states"]


@pytest.mark.parametrize("planted", ["a pickle", "a pickle at the old name", "another sampler"])
def test_a_sampler_file_runs_no_code(
    tmp_path: Path, planted: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The sampler's state is JSON numbers, never a pickle: a pickle whose `__reduce__` runs a
    shell command, planted as the sampler file (or as fedlight's former optuna_sampler.pkl), runs
    nothing and the study draws afresh and says so; so does the state of another kind of
    sampler."""
    marker, kept = tmp_path / "ran", tmp_path / SAMPLER_FILE
    if planted == "another sampler":
        keep_sampler(optuna.samplers.RandomSampler(seed=0), kept)
    elif planted == "a pickle":
        kept.write_bytes(pickle.dumps(RunsCode(marker)))
    else:
        (tmp_path / "optuna_sampler.pkl").write_bytes(pickle.dumps(RunsCode(marker)))
    configured = optuna.samplers.TPESampler(seed=0)

    assert continued_sampler(configured, kept) is configured
    assert not marker.exists()
    err = capsys.readouterr().err
    assert "the sampler draws afresh (" in err
    if planted == "another sampler":
        assert "it was a RandomSampler" in err


@pytest.mark.parametrize("cut", [0, 1, 100, -1])
def test_a_cut_short_sampler_file_draws_afresh_and_says_so(
    tmp_path: Path, cut: int, capsys: pytest.CaptureFixture[str]
) -> None:
    kept = tmp_path / SAMPLER_FILE
    keep_sampler(optuna.samplers.TPESampler(seed=0), kept)
    kept.write_bytes(kept.read_bytes()[:cut])
    configured = optuna.samplers.TPESampler(seed=0)
    assert continued_sampler(configured, kept) is configured
    err = capsys.readouterr().err
    assert "the sampler draws afresh (" in err and str(kept) in err
    assert len(err.strip().splitlines()) == 1


def test_the_sampler_file_is_never_written_through_a_link(tmp_path: Path) -> None:
    """A link planted at the name the sampler file was first written under (a study's sweep
    directory may be writable by others): its target is left as it was; one at the temporary
    name fedlight writes is refused in one line."""
    victim = tmp_path / "victim"
    victim.write_text("mine")
    kept = tmp_path / SAMPLER_FILE
    (tmp_path / f"{SAMPLER_FILE}.partial").symlink_to(victim)
    keep_sampler(optuna.samplers.TPESampler(seed=0), kept)
    assert victim.read_text() == "mine"
    assert not kept.is_symlink() and kept.stat().st_size > 0

    partial = kept.with_suffix(".tmp")
    partial.unlink(missing_ok=True)
    partial.symlink_to(victim)
    with pytest.raises(ConfigError, match="symbolic link"):
        keep_sampler(optuna.samplers.TPESampler(seed=1), kept)
    assert victim.read_text() == "mine"


def one_error_line(result: subprocess.CompletedProcess, pattern: str) -> None:
    """A refusal: exit code 2 and the one line `fedlight: error: ...` (or the report's) last."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert re.match(r"fedlight( report)?: error: ", last) and re.search(pattern, last), last


def test_a_finished_study_runs_no_planted_code_and_a_refused_one_changes_nothing(
    tmp_path: Path,
) -> None:
    """A finished study: a sampler file planted to run a command is not run by `fedlight resume`;
    continued with another search, or with other `fl.rounds` than its trials ran, it is refused
    in one line and its record (multirun.yaml) stays as it was; its storage cut short or
    overwritten is one line from `fedlight resume` and `fedlight report`, not a traceback; and
    the study's console carries none of alembic's setup lines."""
    sweep = tmp_path / "study"
    study = [*STUDY[:2], "hydra.sweeper.n_trials=2", *STUDY[3:], "fl.rounds=2"]
    first = run_cli(*study, f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert "alembic" not in first.stdout + first.stderr
    marker = tmp_path / "ran"
    (sweep / SAMPLER_FILE).write_bytes(pickle.dumps(RunsCode(marker)))
    run_cli("resume", str(sweep), cwd=tmp_path)
    assert not marker.exists()
    assert [t.state.name for t in trials(sweep)] == ["COMPLETE"] * 2

    record = (sweep / "multirun.yaml").read_bytes()
    searched = run_cli(
        "resume", str(sweep), "optim.momentum=interval(0,0.9)", cwd=tmp_path, check=False
    )
    one_error_line(searched, "holds a study of another search")
    assert (sweep / "multirun.yaml").read_bytes() == record
    longer = run_cli("resume", str(sweep), "fl.rounds=3", cwd=tmp_path, check=False)
    one_error_line(longer, r"fl\.rounds=3: .*2 rounds")
    assert (sweep / "multirun.yaml").read_bytes() == record
    assert "fl.rounds=2" in resume_command(sweep)

    storage = sweep / STUDY_FILE
    whole = storage.read_bytes()
    for damaged in (whole[: len(whole) // 2], whole[:100], os.urandom(len(whole))):
        storage.write_bytes(damaged)
        resumed = run_cli("resume", str(sweep), cwd=tmp_path, check=False)
        one_error_line(resumed, f"{re.escape(str(storage))} is not a readable Optuna study")
        assert report_main([str(sweep)]) == 2
    assert (sweep / "multirun.yaml").read_bytes() == record


PARETO = [
    "-m",
    "hydra/sweeper=optuna",
    "hydra.sweeper.n_trials=3",
    "hydra.sweeper.objectives=[best_accuracy,comm_mb]",
    "upload=topk",
    "upload.topk.ratio=tag(log,interval(0.01,1.0))",
    *SMALL,
    "data.validation_fraction=0.2",
    "eval.split=validation",
]


def pareto_front(values: dict[int, tuple[float, float]]) -> set[int]:
    """The trials no other beats in both (accuracy up, megabytes down), by hand."""

    def beats(a: tuple[float, float], b: tuple[float, float]) -> bool:
        return a[0] >= b[0] and a[1] <= b[1] and a != b

    return {n for n, v in values.items() if not any(beats(w, v) for w in values.values())}


def test_a_killed_multi_objective_study_continues_and_reports_its_pareto_front(
    tmp_path: Path,
) -> None:
    """Best validation accuracy up and communication down (top-k's share of entries searched),
    3 trials through the CLI on optuna >= 4, killed once trial 0 finished and trial 1 is half-way:
    `fedlight resume` continues trial 1 from its checkpoint and runs trial 2 only; each trial's
    two values are its run's summary.json; the same draws and values as the study run without a
    kill (the sampler's state kept); the Pareto front, checked by hand, in
    optimization_results.yaml and in `fedlight report`; optuna-dashboard serves the study."""
    sweep = tmp_path / "pareto"
    kill_half_way(PARETO, sweep, tmp_path)
    before = trials(sweep)
    assert [t.state.name for t in before] == ["COMPLETE", "RUNNING"]

    resumed = run_cli("resume", str(sweep), cwd=tmp_path)

    assert "trials 1 were interrupted" in resumed.stderr
    assert "the sampler continues from its state after the latest draw" in resumed.stderr
    study = study_of(sweep)
    after = study.trials
    assert [t.state.name for t in after] == ["COMPLETE"] * 3
    assert after[1].params == before[1].params
    states = sweep_states(sweep)
    assert [s.summary["resumes"] for s in states] == [0, 1, 0]
    runs = [(s.summary["best_accuracy"], s.summary["comm_mb"]) for s in states]
    assert [tuple(t.values) for t in after] == runs
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    front = pareto_front(dict(enumerate(runs)))
    assert {t.number for t in study.best_trials} == front
    assert len({v[1] for v in runs}) == 3  # the ratio changes the megabytes: a real trade-off

    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert results["objectives"] == ["best_accuracy", "comm_mb"]
    assert results["directions"] == ["maximize", "minimize"]
    assert {s["trial"] for s in results["solutions"]} == front
    for solution in results["solutions"]:
        trial = after[solution["trial"]]
        assert solution["params"] == trial.params
        assert solution["values"] == dict(
            zip(["best_accuracy", "comm_mb"], trial.values, strict=True)
        )
    with pytest.raises(ConfigError, match="Pareto front"):
        tuned_command(sweep)

    assert report_main([str(sweep)]) == 0
    report = (sweep / "report.md").read_text()
    numbers = ", ".join(str(n) for n in sorted(front))
    assert "## Study pareto: best_accuracy maximized; comm_mb minimized" in report
    assert f"Pareto front (best_accuracy, comm_mb): {len(front)} of 3 completed trials" in report
    assert f"every objective: trial{'s' if len(front) > 1 else ''} {numbers} (marked" in report
    rows = [line for line in report.splitlines() if re.match(r"\| \d \| ", line)]
    assert [("◆" in row) for row in rows] == [n in front for n in range(3)]
    for row, (accuracy, megabytes) in zip(rows, runs, strict=True):
        assert f"| {accuracy:.4f} | {megabytes:.4f} |" in row
    assert (sweep / "study.png").stat().st_size > 0

    whole = tmp_path / "whole"
    run_cli(*PARETO, "fl.rounds=16", f"hydra.sweep.dir={whole}", cwd=tmp_path)
    uninterrupted = trials(whole)
    assert [t.params for t in after] == [t.params for t in uninterrupted]
    assert [t.values for t in after] == [t.values for t in uninterrupted]

    storage = f"sqlite:///{(sweep / STUDY_FILE).resolve()}"
    assert f"fedlight: optuna: browse the study: optuna-dashboard {storage}" in resumed.stderr
    dashboard_serves(storage, tmp_path, trials=3, names=["best_accuracy", "comm_mb"])


def dashboard_serves(storage: str, cwd: Path, trials: int, names: list[str]) -> dict:
    """`optuna-dashboard <storage>` (the command the study prints at its end, docs/tuning.md)
    serves the study: its trials, its objectives' names; skipped where optuna-dashboard is not
    installed (it is in the `optuna` extra). The study as the dashboard serves it."""
    command = Path(sys.executable).with_name("optuna-dashboard")
    if not command.is_file():
        pytest.skip("optuna-dashboard is not installed (pip install 'fedlight[optuna]')")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [str(command), storage, "--port", str(port), "--quiet"],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies") as answer:
                    studies = json.load(answer)["study_summaries"]
                break
            except OSError:
                assert server.poll() is None, server.communicate()[0]
                assert time.monotonic() < deadline, "optuna-dashboard did not answer in 120 s"
                time.sleep(0.5)
        (study,) = studies
        assert study["study_name"] == "fedlight"
        url = f"http://127.0.0.1:{port}/api/studies/{study['study_id']}"
        with urllib.request.urlopen(url) as answer:
            detail = json.load(answer)
        assert len(detail["trials"]) == trials
        assert detail["objective_names"] == names
        return detail
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
        server.wait()


def test_a_study_in_optunas_journal_file_continues_and_is_reported(tmp_path: Path) -> None:
    """`hydra.sweeper.storage=journal`: the study in <sweep dir>/optuna_journal.log (no SQLite);
    run again with more trials it continues (its sampler's state kept) and runs only the new
    one; `fedlight report` and optuna-dashboard read the journal file."""
    sweep = tmp_path / "journal"
    study = [*STUDY[:2], "hydra.sweeper.n_trials=2", *STUDY[3:], "fl.rounds=2"]
    journal = [*study, "hydra.sweeper.storage=journal", f"hydra.sweep.dir={sweep}"]
    first = run_cli(*journal, cwd=tmp_path)
    assert f"in {sweep.resolve() / JOURNAL_FILE}: 0 of 2 trials done" in first.stderr
    assert (sweep / JOURNAL_FILE).is_file() and not (sweep / STUDY_FILE).exists()
    assert [t.state.name for t in trials(sweep)] == ["COMPLETE"] * 2

    more = run_cli(*journal, "hydra.sweeper.n_trials=3", "resume=auto", cwd=tmp_path)
    assert "2 of 3 trials done" in more.stderr
    assert "the sampler continues from its state after the latest draw" in more.stderr
    assert [s.summary["resumes"] for s in sweep_states(sweep)] == [0, 0, 0]
    done = trials(sweep)
    assert [t.state.name for t in done] == ["COMPLETE"] * 3
    whole = tmp_path / "whole"
    run_cli(*study, "hydra.sweeper.n_trials=3", f"hydra.sweep.dir={whole}", cwd=tmp_path)
    assert [t.params for t in done] == [t.params for t in trials(whole)]

    assert report_main([str(sweep)]) == 0
    report = (sweep / "report.md").read_text()
    assert f"(Optuna study `fedlight` in `journal/{JOURNAL_FILE}`)" in report
    assert "3 trials: 3 completed, 0 failed" in report
    journal_file = (sweep / JOURNAL_FILE).resolve()
    assert f"browse the study: optuna-dashboard {journal_file}" in more.stderr
    dashboard_serves(str(journal_file), tmp_path, trials=3, names=["best_accuracy"])


def test_a_study_of_an_older_optuna_is_one_line_naming_the_upgrade(tmp_path: Path) -> None:
    """A study whose storage an older Optuna set up (optuna 2's, by fedlight before it ran on
    optuna 4): one line naming the file and Optuna's command that upgrades it."""
    sweep = tmp_path / "old"
    sweep.mkdir()
    storage = f"sqlite:///{sweep / STUDY_FILE}"
    optuna.create_study(study_name="fedlight", storage=storage)
    with sqlite3.connect(sweep / STUDY_FILE) as connection:
        connection.execute("UPDATE alembic_version SET version_num = 'v2.6.0.a'")
    connection.close()
    with pytest.raises(ConfigError) as refused:
        load_study(sweep)  # what `fedlight report` and `fedlight resume` read it with
    said = str(refused.value)
    assert "\n" not in said and "is an Optuna study of another version" in said
    assert f"optuna storage upgrade --storage sqlite:///{(sweep / STUDY_FILE).resolve()}" in said
