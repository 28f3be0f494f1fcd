"""Each round's objective reported to its Optuna trial (the study's learning curves), and
`hydra/sweeper/pruner` stopping hopeless trials: the run stops cleanly after the round, its files
kept, the trial told pruned and marked so in `fedlight report`; whether the job runs in the
sweeper's process or in a launcher's worker process."""

from pathlib import Path

import optuna
import pytest
import yaml

from fedlight.reports.cli import main as report_main
from fedlight.runs.study_settings import built_pruner
from fedlight.runs.trial_report import round_value
from fedlight.store.sweeps import sweep_states
from tests.conftest import run_cli
from tests.runs.test_optuna_sweeper import (
    SMALL,
    best_so_far,
    dashboard_serves,
    one_error_line,
    study_of,
    sweeper_config,
)

HOPELESS = 1e-6  # a learning rate that leaves the model at chance: pruned next to a good one
PRUNED_STUDY = [
    "-m",
    "hydra/sweeper=optuna",
    "hydra/sweeper/sampler=random",
    "hydra/sweeper/pruner=median",
    "hydra.sweeper.pruner.n_startup_trials=1",
    "hydra.sweeper.n_trials=3",
    f"optim.lr=choice(0.5,{HOPELESS})",
    *SMALL,
    "fl.rounds=4",
    "data.validation_fraction=0.2",
    "eval.split=validation",
    "objective=best_accuracy",
]


@pytest.mark.parametrize(
    "launcher",
    [[], pytest.param(["hydra/launcher=joblib"], marks=pytest.mark.slow)],
    ids=["in-process", "joblib"],
)
def test_a_hopeless_trial_is_pruned_and_each_round_reaches_its_trial(
    tmp_path: Path, launcher: list[str]
) -> None:
    """Random draws of a good and a hopeless learning rate, the median pruner after one finished
    trial: every trial holds its run's best accuracy so far at each round (so optuna-dashboard
    draws its curve); a hopeless trial drawn after a good one finished stops after round 1 with
    its files written (summary.json says why) and is told pruned, the others run their 4 rounds
    (with the sampler's seed 0 the draws are hopeless, good, hopeless);
    the report counts and marks the pruned ones, and a resumed study runs none of them again."""
    sweep = tmp_path / "pruned"
    ran = run_cli(*PRUNED_STUDY, *launcher, f"hydra.sweep.dir={sweep}", cwd=tmp_path)

    trials = study_of(sweep).trials
    jobs = {s.directory.name: s for s in sweep_states(sweep)}
    learnt = False  # a good learning rate's trial has finished
    for trial in trials:
        job = jobs[str(trial.number)]
        assert trial.intermediate_values == best_so_far(job.directory)
        hopeless = trial.params["optim.lr"] == HOPELESS
        if hopeless and learnt:
            assert trial.state.name == "PRUNED" and list(trial.intermediate_values) == [1]
            assert job.summary["rounds"] == 1
            assert job.summary["stopped"].startswith(
                f"hydra/sweeper/pruner pruned trial {trial.number} at round 1 (best_accuracy "
            )
            assert (job.directory / "checkpoint.pt").is_file()
            assert f"optuna: trial {trial.number}: pruned at round 1 (best_accuracy" in ran.stderr
        else:
            assert trial.state.name == "COMPLETE" and job.summary["rounds"] == 4
        learnt = learnt or not hopeless
    pruned = [t.number for t in trials if t.state.name == "PRUNED"]
    assert pruned, "the draws give no hopeless trial after a good one"
    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert (results["trials"], results["pruned"]) == (3, len(pruned))

    assert report_main([str(sweep)]) == 0
    report = (sweep / "report.md").read_text()
    assert f"3 trials: {3 - len(pruned)} completed, {len(pruned)} pruned, 0 failed" in report
    for number in pruned:
        row = next(line for line in report.splitlines() if line.startswith(f"| {number} | "))
        assert row.startswith(f"| {number} | {HOPELESS} | ")
        assert " | pruned at round 1 (best_accuracy " in row

    resumed = run_cli("resume", str(sweep), cwd=tmp_path)
    assert "3 of 3 trials done" in resumed.stderr and "run directory" not in resumed.stdout

    storage = f"sqlite:///{(sweep / 'optuna.db').resolve()}"
    served = dashboard_serves(storage, tmp_path, trials=3, names=["best_accuracy"])
    for shown, trial in zip(served["trials"], trials, strict=True):  # each trial's curve
        steps = {v["step"]: v["value"] for v in shown["intermediate_values"]}
        assert steps == trial.intermediate_values


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["hydra.sweeper.objectives=[best_accuracy,comm_mb]"],
            r"hydra/sweeper/pruner \(MedianPruner\) judges a trial by each round's value of one "
            r"objective; a study of several .*hydra/sweeper/pruner=none",
        ),
        (
            ["objective=comm_mb"],
            r"objective=comm_mb is a run's total, with none per round: prune on an accuracy",
        ),
        (
            ["hydra.sweeper.pruner.n_warmup_steps=two"],
            r"hydra\.sweeper\.pruner\.n_warmup_steps='two' must be a number",
        ),
        (["hydra.sweeper.pruner.n_startup_trials=-1"], r"hydra\.sweeper\.pruner: .*"),
    ],
)
def test_a_pruner_without_a_value_per_round_to_judge_is_one_line(
    tmp_path: Path, overrides: list[str], message: str
) -> None:
    """A pruner judges one objective's value per round: several objectives, an objective that is
    a run's total, or a pruner setting of the wrong type is refused in one line before any trial
    runs."""
    study = [*PRUNED_STUDY[:4], "hydra.sweeper.n_trials=2", "optim.lr=interval(0.01,0.3)"]
    refused = run_cli(
        *study, *SMALL, *overrides, f"hydra.sweep.dir={tmp_path / 's'}", cwd=tmp_path, check=False
    )
    one_error_line(refused, message)
    assert not (tmp_path / "s" / "0").exists()


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("none", optuna.pruners.NopPruner),
        ("median", optuna.pruners.MedianPruner),
        ("successive_halving", optuna.pruners.SuccessiveHalvingPruner),
        ("hyperband", optuna.pruners.HyperbandPruner),
    ],
)
def test_each_pruner_yaml_builds_its_optuna_pruner(name: str, kind: type) -> None:
    """Every `hydra/sweeper/pruner=<name>` names arguments the installed optuna takes; none is
    the default (each round's value is reported all the same)."""
    config = sweeper_config(f"hydra/sweeper/pruner={name}")
    assert type(built_pruner(config["pruner"])) is kind
    assert type(built_pruner(sweeper_config()["pruner"])) is optuna.pruners.NopPruner


def test_the_value_of_each_round_is_the_objectives() -> None:
    assert round_value("best_accuracy", "validation") == ("val_accuracy", True)
    assert round_value("best_accuracy", "test") == ("test_accuracy", True)
    assert round_value("final_accuracy", "validation") == ("test_accuracy", False)
    assert round_value("val_accuracy", "validation") == ("val_accuracy", False)
    assert round_value("test_mse", "test") == ("test_mse", False)  # a logged column
    assert round_value("comm_mb", "test") is None
    assert round_value("rounds_to_target", "test") is None
