"""A resume from a checkpoint that cannot continue its run is one line naming the file and what
differs (fedlight/drivers/checkpoint_checks.py), never a traceback nor a resume that loses rounds:
a module edited since the run started, a weight missing or not finite, a random state cut short,
a format of a newer fedlight, rows that do not reach its completed rounds, a config that is no
config. And `fedlight resume` of a stopped run says it stopped, not that it is running."""

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from fedlight.store.checkpoint import load_checkpoint, save_checkpoint
from fedlight.store.run_files import CHECKPOINT_NAME
from tests.conftest import TINY, rows_without_timings, run_cli
from tests.helpers.finished_runs import copy_of, finished_run, one_thread
from tests.runs.test_hardening import assert_one_line, cli_exit

MODULE = "tests.helpers.user_module.RecordingModule"
RUN = [*TINY, "fl.rounds=2", f"model._target_={MODULE}"]


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    yield from one_thread()


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 2-round run of a user's module, made through the CLI."""
    return finished_run(tmp_path_factory, "faults", RUN)


def first_weight(state: dict) -> str:
    return sorted(state["server_weights"])[0]


def widened(state: dict) -> None:
    name = first_weight(state)
    state["server_weights"][name] = torch.zeros(7, *state["server_weights"][name].shape[1:])


FAULTS: dict[str, tuple[Callable[[dict], None], str]] = {
    "a weight of another shape (E6)": (widened, r"server weight \S+ is \(7,.*the model's is"),
    "a weight missing (E11)": (
        lambda state: state["server_weights"].pop(first_weight(state)),
        r"server weight \S+ is missing; resume with the model the run was started with",
    ),
    "a weight not finite (E12)": (
        lambda state: state["server_weights"][first_weight(state)].view(-1)[0].fill_(torch.nan),
        r"server weight \S+ is not finite, and the run had not diverged",
    ),
    "a random state cut short (E9)": (
        lambda state: state.update(torch_rng=state["torch_rng"][:5]),
        r"holds no random state of torch's \(\(5,\) uint8, expected \d+ bytes\)",
    ),
    "a newer format (E10)": (
        lambda state: state.update(state_format=99),
        r"has state format 99, which this fedlight \(formats 1 to 3\) cannot read",
    ),
    "rows cut (E8)": (
        lambda state: state.update(rows=[]),
        r"says 2 rounds were completed but its rows end at round None",
    ),
    "a config that is a list (E13)": (
        lambda state: state.update(config="[1, 2]"),
        r"holds no readable config",
    ),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_checkpoint_that_cannot_continue_its_run_is_one_line(
    finished: Path, tmp_path: Path, fault: str, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    run = copy_of(finished, tmp_path, stopped=True)
    damage, said = FAULTS[fault]
    state = load_checkpoint(run / CHECKPOINT_NAME)
    damage(state)
    save_checkpoint(run / CHECKPOINT_NAME, state)
    metrics = (run / "metrics.csv").read_bytes()
    args = [*RUN, "fl.rounds=3", f"resume={run}", f"hydra.run.dir={run}"]
    code, err = cli_exit(args, monkeypatch, capsys)
    assert code == 2
    assert_one_line(err, rf"resume={run}: its checkpoint.pt.*{said}|{said}")
    assert (run / "metrics.csv").read_bytes() == metrics


def test_fedlight_resume_of_a_stopped_run_says_it_stopped(finished: Path, tmp_path: Path) -> None:
    run = copy_of(finished, tmp_path, stopped=True)
    own = f"model._target_={MODULE}"  # the user's word for the record's (runs/recorded_code.py)
    result = run_cli("resume", str(run), own, "fl.rounds=3", cwd=tmp_path)
    said = result.stdout + result.stderr
    assert "is stopped: resumes from its checkpoint" in said, said
    assert "is running" not in said
    assert len(rows_without_timings(run)) == 3
