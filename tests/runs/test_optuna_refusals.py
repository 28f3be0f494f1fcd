"""What `hydra/sweeper=optuna` refuses in one line (a search it cannot draw, a typo, a damaged
file in the sweep directory) and the syntax of Hydra's Optuna sweeper it reads besides
(`glob()`, `tag(int, ...)`)."""

import json
from pathlib import Path

import numpy as np
import optuna
import pytest

from fedlight.runs.optuna_sweeper import continued_sampler
from fedlight.runs.sampler_state import keep_sampler
from fedlight.store.run_files import JOURNAL_FILE, SAMPLER_FILE
from tests.conftest import run_cli
from tests.runs.test_optuna_sweeper import SMALL, one_error_line, study_of, trials

ONE_ROUND = [
    "-m",
    "hydra/sweeper=optuna",
    "hydra.sweeper.n_trials=2",
    *SMALL,
    "fl.rounds=1",
]


@pytest.mark.parametrize(
    ("search", "message"),
    [
        (
            ["objective=final_acc", "optim.lr=interval(0.01,0.2)"],
            r"^fedlight: error: objective=final_acc is not a summary\.json number \(did you mean "
            r"final_accuracy\?\); a column .* hydra\.sweeper\.direction=minimize",
        ),
        (["optim.lr=interval(0.2,0.01)"], r"its low end is above its high end; give them low"),
        (["local.epochs=range(5,1)"], r"local\.epochs=range\(5,1\) lists no value"),
        (
            ["optim.lr=tag(Log,interval(0.01,0.1))"],
            r"reads the tags log \(a log scale\), int \(whole numbers\), not Log$",
        ),
        (
            ["local.epochs=interval(1,3)"],
            r"an integer setting takes a whole number \(searched by hydra/sweeper=optuna: "
            r"tag\(int,interval\(a,b\)\)\)$",
        ),
        (["algo=fedprox", "algo.mu=tag(log,interval(0,1))"], r"a log scale needs a low end above"),
    ],
)
def test_a_search_it_cannot_draw_is_one_line(
    tmp_path: Path, search: list[str], message: str
) -> None:
    sweep = tmp_path / "s"
    refused = run_cli(*ONE_ROUND, *search, f"hydra.sweep.dir={sweep}", cwd=tmp_path, check=False)
    one_error_line(refused, message)
    assert not (sweep / "0").exists()


def test_glob_and_whole_numbers_are_searched_as_hydras_optuna_sweeper_searches_them(
    tmp_path: Path,
) -> None:
    """`glob(fedav*)` is a categorical parameter over the group's matching options, and
    `tag(int, interval(1,2))` draws whole numbers (what an integer setting takes)."""
    sweep = tmp_path / "s"
    search = ["algo=glob(fedav*)", "local.epochs=tag(int,interval(1,2))"]
    run_cli(*ONE_ROUND, *search, f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    done = trials(sweep)
    assert [t.state.name for t in done] == ["COMPLETE"] * 2
    assert study_of(sweep).trials[0].distributions["algo"].choices == ("fedavg", "fedavgm")
    assert {type(t.params["local.epochs"]) for t in done} == {int}


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (
            lambda key: np.zeros(624, dtype=np.uint32),
            "its MT19937 key is all zeros (every draw from it",
        ),
        (lambda key: np.full(624, 0.5), "its MT19937 key is not 624 unsigned 32-bit integers"),
    ],
    ids=["all zeros", "floats"],
)
def test_a_degenerate_sampler_state_draws_afresh_and_says_so(
    tmp_path: Path, damage: object, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A kept state whose MT19937 key numpy would take (zeros, or floats it rounds to zeros) but
    from which every draw repeats: refused, and the sampler draws afresh, saying why."""
    kept = tmp_path / SAMPLER_FILE
    keep_sampler(optuna.samplers.TPESampler(seed=0), kept)
    state = json.loads(kept.read_text())
    for generator in state["random_states"].values():
        key = np.asarray(generator["state"]["key"]["array"])
        generator["state"]["key"] = {"array": damage(key).tolist(), "dtype": str(damage(key).dtype)}
    kept.write_text(json.dumps(state))
    configured = optuna.samplers.TPESampler(seed=0)
    assert continued_sampler(configured, kept) is configured
    err = capsys.readouterr().err
    assert "the sampler draws afresh (" in err and said in err


def test_a_folder_at_the_sampler_files_name_is_one_line_before_anything_is_written(
    tmp_path: Path,
) -> None:
    sweep = tmp_path / "s"
    (sweep / SAMPLER_FILE).mkdir(parents=True)
    search = ["optim.lr=interval(0.01,0.2)", f"hydra.sweep.dir={sweep}"]
    refused = run_cli(*ONE_ROUND, *search, cwd=tmp_path, check=False)
    one_error_line(refused, rf"{SAMPLER_FILE} is a directory, where the study keeps its sampler")
    assert sorted(p.name for p in sweep.iterdir()) == [SAMPLER_FILE]


def test_a_journal_cut_short_is_one_line_not_a_rerun_without_parameters(tmp_path: Path) -> None:
    """A finished study's journal file cut at half its size: `fedlight resume` refuses it in
    one line naming the file (Optuna would read it as a study whose later trial runs without its
    parameters, and break at its next write), and nothing runs."""
    sweep = tmp_path / "s"
    search = ["optim.lr=interval(0.01,0.2)", "hydra.sweeper.storage=journal"]
    run_cli(*ONE_ROUND, *search, f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    journal = sweep / JOURNAL_FILE
    whole = journal.read_bytes()
    journal.write_bytes(whole[: len(whole) // 2])
    before = {p: p.stat().st_mtime_ns for p in sweep.rglob("*") if p.is_file()}
    resumed = run_cli("resume", str(sweep), cwd=tmp_path, check=False)
    one_error_line(
        resumed, rf"{journal.resolve()} is not a readable Optuna study \(its last record"
    )
    assert {p: p.stat().st_mtime_ns for p in sweep.rglob("*") if p.is_file()} == before
