"""Two sweeps on one Optuna storage (a journal file or an SQLite URL shared by several sweep
directories, docs/tuning.md): each runs again only its own interrupted trials, never another
sweep's live one, and every trial is told once."""

import signal
import subprocess
from pathlib import Path

import optuna
import pytest
from optuna.storages.journal import JournalFileBackend, JournalStorage
from optuna.trial import TrialState

from fedlight.runs.optuna_sweeper import SWEEP_ATTR, tell
from fedlight.store.sweeps import sweep_states
from tests.conftest import run_cli
from tests.runs.test_optuna_sweeper import SMALL
from tests.runs.test_sweep_resume import started

SHARED = [
    "-m",
    "hydra/sweeper=optuna",
    "optim.lr=tag(log,interval(0.01,0.3))",
    *SMALL,
    "fl.rounds=2",
]


def shared_storage(kind: str, tmp_path: Path) -> tuple[str, optuna.storages.BaseStorage | str]:
    """`hydra.sweeper.storage` of a storage outside both sweep directories, and as Optuna opens
    it."""
    if kind == "journal":
        path = tmp_path / "shared.log"
        return str(path), JournalStorage(JournalFileBackend(str(path)))
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    return url, url


@pytest.mark.parametrize("kind", ["journal", "sqlite"])
def test_a_sweep_leaves_another_sweeps_running_trial_alone(tmp_path: Path, kind: str) -> None:
    """Sweep A ran trial 0 and runs trial 1 (planted RUNNING, marked as A's); sweep B on the same
    storage does not take trial 1 for an interrupted trial of its own: it says so, runs new
    trials 2 and 3 in its directory, and A can still tell trial 1."""
    given, storage = shared_storage(kind, tmp_path)
    first, second = tmp_path / "A", tmp_path / "B"
    run_cli(
        *SHARED,
        "hydra.sweeper.n_trials=1",
        f"hydra.sweeper.storage={given}",
        f"hydra.sweep.dir={first}",
        cwd=tmp_path,
    )
    study = optuna.load_study(study_name="fedlight", storage=storage)
    live = study.ask({"optim.lr": optuna.distributions.FloatDistribution(0.01, 0.3, log=True)})
    live.set_user_attr(SWEEP_ATTR, str(first.resolve()))

    ran = run_cli(
        *SHARED,
        "hydra.sweeper.n_trials=4",
        f"hydra.sweeper.storage={given}",
        f"hydra.sweep.dir={second}",
        cwd=tmp_path,
    )

    assert "were interrupted" not in ran.stderr
    assert f"trial 1 runs in another sweep ({first.resolve()}): left to it" in ran.stderr
    assert [s.directory.name for s in sweep_states(second)] == ["2", "3"]
    states = [
        t.state.name for t in optuna.load_study(study_name="fedlight", storage=storage).trials
    ]
    assert states == ["COMPLETE", "RUNNING", "COMPLETE", "COMPLETE"]
    study.tell(1, 0.5)  # sweep A's trial is A's to tell


def test_two_sweeps_at_once_on_one_journal_tell_every_trial_once(tmp_path: Path) -> None:
    """Two sweeps started together on one journal file share the study's trials: both end
    without an error, every trial is complete, run in exactly one of the two directories, and
    its value is that job's."""
    given, storage = shared_storage("journal", tmp_path)
    processes = [
        started(
            [
                *SHARED,
                "fl.rounds=3",
                "hydra.sweeper.n_trials=4",
                f"hydra.sweeper.storage={given}",
                f"hydra.sweep.dir={tmp_path / name}",
            ],
            tmp_path,
        )
        for name in ("A", "B")
    ]
    outputs = []
    for process in processes:
        try:
            outputs.append(process.communicate(timeout=280))
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            raise
    for process, (_, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err
        assert "Traceback" not in err and "were interrupted" not in err, err
    trials = optuna.load_study(study_name="fedlight", storage=storage).trials
    assert len(trials) >= 4 and {t.state.name for t in trials} == {"COMPLETE"}
    ran = {s.directory.name: s for name in ("A", "B") for s in sweep_states(tmp_path / name)}
    count = sum(len(sweep_states(tmp_path / name)) for name in ("A", "B"))
    assert count == len(ran) == len(trials)
    for trial in trials:
        assert trial.value == ran[str(trial.number)].summary["final_accuracy"]


def test_a_trial_told_already_by_another_process_is_one_line_not_an_error() -> None:
    """A trial that another process sharing the storage told first (a sweep of an older fedlight)
    keeps its value; telling it again says so in one line instead of Optuna's ValueError."""
    study = optuna.create_study(direction="maximize")
    study.tell(study.ask(), 0.3)
    said = tell(study, study.trials[0], TrialState.COMPLETE, [0.7], "final_accuracy 0.7")
    assert said == (
        "final_accuracy 0.7; not told: the study has it complete already (another process "
        "sharing its storage told it)"
    )
    assert study.trials[0].value == 0.3
