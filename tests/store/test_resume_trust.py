"""A resume trusts no client-state file: checkpoint.pt records each version file's size and
SHA-256 (fl.client_state=disk), and every file it names is checked before any work, through the
CLI, each fault refused in one line naming the file; an older checkpoint without digests has its
files checked against the model's shapes and dtypes and for finite values."""

import hashlib
import math
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from fedlight.cli import main as cli
from fedlight.store.checkpoint import load_checkpoint, save_checkpoint
from fedlight.store.client_states import CLIENT_STATES_DIR
from fedlight.store.run_files import CHECKPOINT_NAME
from tests.conftest import TINY, rows_without_timings
from tests.helpers.finished_runs import copy_of, finished_run, one_thread
from tests.runs.test_hardening import RunsCode, assert_one_line, cli_exit

RUN = [*TINY, "algo=scaffold", "fl.client_state=disk", "fl.rounds=2"]


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    yield from one_thread()


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-round SCAFFOLD run with its client states on disk, run through the CLI."""
    return finished_run(tmp_path_factory, "trust", RUN)


def state_file(run: Path) -> tuple[str, Path]:
    """The client and path of the first version file the checkpoint names."""
    client, entry = next(iter(load_checkpoint(run / CHECKPOINT_NAME)["client_states"].items()))
    round_index = entry if isinstance(entry, int) else entry[0]
    return client, run / CLIENT_STATES_DIR / client / f"{round_index}.pt"


def resume(run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> tuple[int, str]:
    out = tmp_path / "resumed"
    code, err = cli_exit(
        [*RUN, "fl.rounds=3", f"resume={run}", f"hydra.run.dir={out}"], monkeypatch, capsys
    )
    assert not out.exists()  # refused before Hydra made the run directory
    return code, err


def flip_first(state: dict[str, torch.Tensor], value: float) -> dict[str, torch.Tensor]:
    changed = {k: t.clone() for k, t in state.items()}
    next(iter(changed.values())).view(-1)[0] = value
    return changed


def transposed(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The first 2-d entry transposed: as many bytes, another shape."""
    key = next(k for k, t in state.items() if t.dim() == 2)
    return {**state, key: state[key].t().contiguous()}


MISMATCH = r"differs from the version checkpoint.pt recorded: SHA-256 mismatch"
# Each tampering of a version file, and what the one line must say about it (with digests).
TAMPERINGS: dict[str, tuple[Callable[[Path, Path], None], str]] = {
    "missing": (lambda path, _: path.unlink(), r"is missing"),
    "truncated": (
        lambda path, _: path.write_bytes(path.read_bytes()[:1000]),
        r"is 1000 bytes where checkpoint.pt recorded \d+ \(is no torch archive \(cut short, or",
    ),
    "empty_dict": (
        lambda path, _: torch.save({}, path),
        r"is \d+ bytes where checkpoint.pt recorded \d+ \(holds no tensors \(an empty dict\)\)",
    ),
    "random_bytes": (
        lambda path, _: path.write_bytes(np.random.default_rng(0).bytes(path.stat().st_size)),
        rf"{MISMATCH} \(is no torch archive \(cut short, or other bytes\)\)",
    ),
    "wrong_shape": (
        # written as fedlight writes a state (same size, another digest)
        lambda path, _: save_checkpoint(path, transposed(torch.load(path, weights_only=True))),
        rf"{MISMATCH} \(holds net\.1\.weight as 64x200 torch\.float32, the model's is 200x64 "
        r"torch\.float32\)",
    ),
    "float64": (
        lambda path, _: torch.save(
            {k: t.double() for k, t in torch.load(path, weights_only=True).items()}, path
        ),
        r"is \d+ bytes where checkpoint.pt recorded \d+ \(holds net\.1\.weight as 200x64 "
        r"torch\.float64, the model's is 200x64 torch\.float32\)",
    ),
    "nan": (
        lambda path, _: save_checkpoint(
            path, flip_first(torch.load(path, weights_only=True), math.nan)
        ),
        rf"{MISMATCH} \(holds NaN or Inf in net\.1\.weight\)",
    ),
    "code": (
        lambda path, marker: torch.save({"net.1.weight": RunsCode(marker)}, path),
        r"is \d+ bytes where checkpoint.pt recorded \d+ \(cannot be read as weights "
        r"\(UnpicklingError: Weights only load failed",
    ),
    "fifo": (
        lambda path, _: (path.unlink(), os.mkfifo(path)),
        r"is not a regular file \(a FIFO, a device or a folder\)",
    ),
}


def test_the_checkpoint_records_each_state_files_size_and_sha256(finished: Path) -> None:
    entries = load_checkpoint(finished / CHECKPOINT_NAME)["client_states"]
    assert len(entries) >= 4  # every client that trained in 2 rounds of 4
    for client, (round_index, size, sha256) in entries.items():
        path = finished / CLIENT_STATES_DIR / client / f"{round_index}.pt"
        assert size == path.stat().st_size
        assert sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("tampering", list(TAMPERINGS))
def test_a_tampered_state_file_is_refused_in_one_line_naming_it(
    finished: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, tampering: str
) -> None:
    run = copy_of(finished, tmp_path)
    client, path = state_file(run)
    tamper, message = TAMPERINGS[tampering]
    tamper(path, tmp_path / "ran")
    code, err = resume(run, tmp_path, monkeypatch, capsys)
    assert code == 2
    assert_one_line(
        err,
        rf"^fedlight: error: resume={run}: {re.escape(str(path))}, client {client}'s state, "
        rf"{message}.*; it cannot be resumed: restore the file as the run wrote it",
    )
    assert not (tmp_path / "ran").exists()  # the pickle's command never ran


def older(run: Path) -> None:
    """The checkpoint as fedlight wrote it before digests: each client's round alone."""
    checkpoint = load_checkpoint(run / CHECKPOINT_NAME)
    checkpoint["client_states"] = {c: e[0] for c, e in checkpoint["client_states"].items()}
    torch.save(checkpoint, run / CHECKPOINT_NAME)


# Without digests only the file's content can tell: each tampering that changes what it holds.
OLDER_MESSAGES = {
    "missing": r"is missing",
    "truncated": r"is no torch archive",
    "empty_dict": r"holds no tensors \(an empty dict\)",
    "random_bytes": r"is no torch archive",
    "wrong_shape": r"holds net\.1\.weight as 64x200 torch\.float32, the model's is 200x64",
    "float64": r"holds net\.1\.weight as 200x64 torch\.float64, the model's is 200x64 torch\.f",
    "nan": r"holds NaN or Inf in net\.1\.weight",
    "code": r"cannot be read as weights \(UnpicklingError",
    "fifo": r"is not a regular file",
}


@pytest.mark.parametrize("tampering", list(OLDER_MESSAGES))
def test_an_older_checkpoints_state_files_are_checked_against_the_model(
    finished: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, tampering: str
) -> None:
    run = copy_of(finished, tmp_path)
    older(run)
    client, path = state_file(run)
    TAMPERINGS[tampering][0](path, tmp_path / "ran")
    code, err = resume(run, tmp_path, monkeypatch, capsys)
    assert code == 2
    assert_one_line(
        err,
        rf"resume={run}: {re.escape(str(path))}, client {client}'s state, "
        + OLDER_MESSAGES[tampering],
    )
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("checkpoint", ["recorded", "older"])
def test_intact_state_files_resume_to_the_uninterrupted_run(
    finished: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checkpoint: str
) -> None:
    run = copy_of(finished, tmp_path)
    if checkpoint == "older":
        older(run)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    for args in (
        [*RUN, "fl.rounds=3", f"hydra.run.dir={tmp_path / 'full'}"],
        [*RUN, "fl.rounds=3", f"resume={run}", f"hydra.run.dir={tmp_path / 'resumed'}"],
    ):
        monkeypatch.setattr(sys, "argv", ["fedlight", *args])
        cli.main()
    assert rows_without_timings(tmp_path / "resumed") == rows_without_timings(tmp_path / "full")
    # the resumed run records the digests of what it wrote, and keeps the linked versions' records
    # (an older checkpoint's: the round alone)
    entries = load_checkpoint(tmp_path / "resumed" / CHECKPOINT_NAME)["client_states"]
    recorded = {c: e for c, e in entries.items() if isinstance(e, list)}
    assert len(recorded) >= (4 if checkpoint == "older" else len(entries))
    for client, (round_index, _, sha256) in recorded.items():
        path = tmp_path / "resumed" / CLIENT_STATES_DIR / client / f"{round_index}.pt"
        assert sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


# A run directory's `.hydra/overrides.yaml` (Hydra's list of the run's overrides) damaged.
DAMAGED_OVERRIDES: dict[str, Callable[[str], str]] = {
    "cut_short": lambda text: text.rstrip("\n")[:-4],  # its last line cut in the middle
    "not_yaml": lambda text: text + "  : [\n",
    "mapping": lambda text: "data: digits\nfl.rounds: 2\n",
    "unparsable": lambda text: text + "- fl.rounds=(((\n",
}


@pytest.mark.parametrize("damage", list(DAMAGED_OVERRIDES))
def test_a_damaged_record_of_the_runs_overrides_is_refused_in_one_line_naming_it(
    finished: Path, tmp_path: Path, damage: str, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    run = copy_of(finished, tmp_path)
    recorded = run / ".hydra" / "overrides.yaml"
    recorded.write_text(DAMAGED_OVERRIDES[damage](recorded.read_text()))
    code, err = resume(run, tmp_path, monkeypatch, capsys)
    assert code == 2
    assert_one_line(
        err, rf"^fedlight: error: resume={re.escape(str(run))}: {re.escape(str(recorded))} "
    )
