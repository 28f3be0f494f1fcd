"""`hydra/sweeper=optuna` as fedlight runs it (fedlight/runs/optuna_sweeper.py): a study kept in the
sweep directory that continues after a kill without running finished trials again, a diverged
trial given the worst value while the study goes on, and the refusals."""

import os
import pickle
import re
import signal
import subprocess
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
import yaml

from fedlight.cli.main import group_options, validate_command_line
from fedlight.core.errors import ConfigError
from fedlight.reports.report import main as report_main
from fedlight.runs.optuna_sweeper import (
    consecutive,
    continued_sampler,
    directions,
    keep_sampler,
    search_record,
    trial_overrides,
)
from fedlight.runs.resume import resume_command
from fedlight.runs.tuned import tuned_command
from fedlight.store.run_files import SAMPLER_FILE, STUDY_FILE
from fedlight.store.sweeps import JobStatus, job_state, sweep_states

from .conftest import TINY, compose_config, run_cli
from .test_hardening import RunsCode
from .test_sweep_resume import snapshot, started, wait_for

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
    storage = f"sqlite:///{sweep / 'optuna.db'}"
    return optuna.load_study(study_name="fedlight", storage=storage).trials


def test_a_killed_study_continues_where_it_stopped(tmp_path: Path) -> None:
    """SIGKILL once trial 0 finished and trial 1 is half-way: `fedlight resume` leaves trial 0's
    files as they are, continues trial 1 in its own directory from its checkpoint (its drawn
    learning rate kept) and runs trial 2 only: three trials, each with its job's value, and the
    same draws and values as the study run without a kill."""
    sweep = tmp_path / "study"
    process = started([*STUDY, "fl.rounds=16", f"hydra.sweep.dir={sweep}"], tmp_path)

    def half_way() -> bool:
        return job_state(sweep / "0").done and 3 <= job_state(sweep / "1").rounds_logged <= 12

    wait_for(half_way, process, "trial 0 finished and trial 1 half-way")
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
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
    assert all(t.user_attrs["fedlight"].startswith("diverged") for t in done)
    assert {s.status for s in sweep_states(sweep)} == {JobStatus.DIVERGED}

    other = [*study[:3], "optim.lr=interval(0.01,0.3)", *study[4:], "resume=auto"]
    refused = run_cli(*other, f"hydra.sweep.dir={sweep}", cwd=tmp_path, check=False)
    assert refused.returncode == 2
    assert (
        refused.stderr.strip()
        .splitlines()[-1]
        .startswith("fedlight: error: hydra/sweeper=optuna: ")
    )
    assert "holds a study of another search (optim.lr=UniformDistribution" in refused.stderr

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
    assert directions(None, "best_accuracy") == ["maximize"]
    assert directions(None, "comm_mb") == ["minimize"]
    assert directions("minimize", "best_accuracy") == ["minimize"]
    with pytest.raises(ConfigError, match="one direction"):
        directions(["maximize", "minimize"], "best_accuracy")


def test_interrupted_trials_run_again_in_batches_of_consecutive_numbers() -> None:
    numbered = [SimpleNamespace(number=n) for n in (3, 4, 5, 7, 8)]
    batches = consecutive(numbered, 2)  # type: ignore[arg-type]
    assert [[t.number for t in b] for b in batches] == [[3, 4], [5], [7, 8]]


def test_the_search_record_leaves_out_what_a_resume_may_change() -> None:
    space = {"optim.lr": optuna.distributions.LogUniformDistribution(0.01, 0.3)}
    fixed = {"algo": "fedprox", "resume": "auto", "fl.workers": 2, "hydra.sweep.dir": "x"}
    assert search_record(space, fixed) == [
        "optim.lr=LogUniformDistribution(high=0.3, low=0.01)",
        "algo=fedprox",
    ]
    trial = SimpleNamespace(params={"optim.lr": 0.05})
    continued = trial_overrides(trial, {"algo": "fedprox", "resume": "auto"})  # type: ignore[arg-type]
    assert continued == ["optim.lr=0.05", "algo=fedprox", "resume=auto"]


def test_a_continued_study_draws_what_the_uninterrupted_one_draws(tmp_path: Path) -> None:
    """The sampler kept after each draw, then restored in a new study object (a new process's):
    the four trials equal an uninterrupted study's; without the kept sampler, they do not."""

    def study(name: str) -> optuna.Study:
        storage = f"sqlite:///{tmp_path / name}.db"
        sampler = optuna.samplers.TPESampler(seed=0, n_startup_trials=2)
        return optuna.create_study(
            study_name="fedlight", storage=storage, sampler=sampler, load_if_exists=True
        )

    def draw(study: optuna.Study, kept: Path) -> None:
        trial = study.ask()
        lr = trial.suggest_float("lr", 1e-3, 1.0, log=True)
        keep_sampler(study.sampler, kept)
        study.tell(trial, -((lr - 0.05) ** 2))

    whole = study("whole")
    for _ in range(4):
        draw(whole, tmp_path / "whole.pkl")
    for name, kept in (("killed", tmp_path / "killed.pkl"), ("lost", tmp_path / "lost.pkl")):
        first = study(name)
        for _ in range(2):
            draw(first, kept)
        if name == "lost":
            kept.unlink()
        continued = study(name)
        continued.sampler = continued_sampler(continued.sampler, kept, tpe_space())
        for _ in range(2):
            draw(continued, kept)
        same = [t.params for t in continued.trials] == [t.params for t in whole.trials]
        assert same is (name == "killed")


def tpe_space() -> dict[str, optuna.distributions.BaseDistribution]:
    return {"lr": optuna.distributions.LogUniformDistribution(1e-3, 1.0)}


@pytest.mark.parametrize("planted", ["alone", "inside a sampler"])
def test_a_sampler_file_runs_no_code(
    tmp_path: Path, planted: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pickle whose `__reduce__` runs a shell command, planted as the sampler file (alone, or
    as an attribute of a real sampler): the study draws afresh and says so, the command not run."""
    marker, kept = tmp_path / "ran", tmp_path / "optuna_sampler.pkl"
    hostile = optuna.samplers.TPESampler(seed=0)
    hostile._gamma = RunsCode(marker)  # type: ignore[attr-defined]
    kept.write_bytes(pickle.dumps(RunsCode(marker) if planted == "alone" else hostile))
    configured = optuna.samplers.TPESampler(seed=0)

    assert continued_sampler(configured, kept, tpe_space()) is configured
    assert not marker.exists()
    assert "the sampler draws afresh (" in capsys.readouterr().err


@pytest.mark.parametrize("cut", [0, 1, 100, -1])
def test_a_cut_short_sampler_file_draws_afresh_and_says_so(
    tmp_path: Path, cut: int, capsys: pytest.CaptureFixture[str]
) -> None:
    kept = tmp_path / "optuna_sampler.pkl"
    whole = pickle.dumps(optuna.samplers.TPESampler(seed=0))
    kept.write_bytes(whole[:cut])
    configured = optuna.samplers.TPESampler(seed=0)
    assert continued_sampler(configured, kept, tpe_space()) is configured
    err = capsys.readouterr().err
    assert "the sampler draws afresh (" in err and str(kept) in err
    assert len(err.strip().splitlines()) == 1


def test_the_sampler_file_is_never_written_through_a_link(tmp_path: Path) -> None:
    """A link planted at the name the sampler was first written under (a study's sweep directory
    may be writable by others): its target is left as it was; one at the temporary name fedlight
    writes is refused in one line."""
    victim = tmp_path / "victim"
    victim.write_text("mine")
    kept = tmp_path / "optuna_sampler.pkl"
    (tmp_path / "optuna_sampler.pkl.partial").symlink_to(victim)
    keep_sampler(optuna.samplers.TPESampler(seed=0), kept)
    assert victim.read_text() == "mine"
    assert not kept.is_symlink() and kept.stat().st_size > 0

    for name in ("optuna_sampler.tmp", "optuna_sampler.pkl.tmp"):
        (tmp_path / name).unlink(missing_ok=True)
        (tmp_path / name).symlink_to(victim)
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
