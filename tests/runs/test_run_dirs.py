"""Run and sweep directories keep what they hold: a new run does not replace another run's results
unless told to (`overwrite=true`), a second sweep into a sweep directory is refused before Hydra
writes, nothing is read or written through a link planted in a run directory, and a full disk
during a checkpoint or a client-state write is one line with the previous checkpoint intact."""

import errno
import hashlib
import os
import re
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import open_dict

from fedlight.cli import main as cli
from fedlight.cli.job import build_job, group_choices
from fedlight.core.errors import ConfigError
from fedlight.loggers.base import RunInfo
from fedlight.loggers.csv import CSVLogger
from fedlight.reports.cli import main as report_main
from fedlight.runs import run_dir
from fedlight.runs.experiment import run_job
from fedlight.store.checkpoint import load_checkpoint, save_checkpoint
from fedlight.store.run_files import CHECKPOINT_NAME
from tests.conftest import TINY, compose_config
from tests.runs.test_hardening import assert_one_line, cli_exit, hold_lock, read_rows

FINISHED = [*TINY, "fl.rounds=3", "eval.every=2"]
SECRET = "a file outside the run directory\n"


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run of FINISHED (rows 2 and 3) with its checkpoint."""
    directory = tmp_path_factory.mktemp("finished") / "run"
    cfg = compose_config(FINISHED)
    choices = group_choices(cfg, cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]
    run_job(build_job(cfg, choices), directory)
    return directory


def cli_run(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI in this process, for a command that runs to its end."""
    monkeypatch.setattr(sys, "argv", ["fedlight", *args])
    cli.main()


def snapshot(directory: Path) -> dict[str, tuple[str, int]]:
    """Every file under `directory` (links not followed): its digest and modification time."""
    return {
        str(path.relative_to(directory)): (
            hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "link",
            path.lstat().st_mtime_ns,
        )
        for path in sorted(directory.rglob("*"))
        if not path.is_dir() or path.is_symlink()
    }


# A new run into another run's directory ---------------------------------------------------------


def test_a_new_run_into_a_finished_runs_directory_is_refused_and_changes_nothing(
    finished: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    before = snapshot(finished)
    code, err = cli_exit([*FINISHED, f"hydra.run.dir={finished}"], monkeypatch, capsys)
    assert code == 2
    assert_one_line(
        err,
        rf"^fedlight: error: hydra.run.dir={finished} holds the results of another run "
        r"\(checkpoint.pt, summary.json, metrics.csv, model.pt, model.ckpt\); continue that run "
        rf"with resume={finished} \(and its overrides\), choose another directory, or give "
        r"overwrite=true to replace them$",
    )
    # resuming another run into it would replace its results just the same
    monkeypatch.setenv("WANDB_MODE", "disabled")
    cli_run([*FINISHED, f"hydra.run.dir={tmp_path / 'x'}"], monkeypatch)
    code, err = cli_exit(
        [*FINISHED, "fl.rounds=4", f"resume={tmp_path / 'x'}", f"hydra.run.dir={finished}"],
        monkeypatch,
        capsys,
    )
    assert code == 2 and "holds the results of another run" in err
    assert snapshot(finished) == before


def test_overwrite_replaces_a_run_and_a_resume_in_place_needs_no_overwrite(
    finished: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("WANDB_MODE", "disabled")
    directory = tmp_path / "run"
    shutil.copytree(finished, directory)
    for store in ("tensorboard", "mlruns"):  # the other run's logger stores go with it
        (directory / store).mkdir()
        (directory / store / "events").write_text("the other run's")
    replacing = [*TINY, "fl.rounds=1", "seed=1", "overwrite=true", f"hydra.run.dir={directory}"]
    cli_run(replacing, monkeypatch)
    assert [row["round"] for row in read_rows(directory)] == ["1"]
    assert not (directory / "tensorboard").exists() and not (directory / "mlruns").exists()
    assert load_checkpoint(directory / CHECKPOINT_NAME)["completed_rounds"] == 1
    # the replacing run goes on in place; overwrite=true is no difference of its config
    resuming = [*TINY, "fl.rounds=2", "seed=1", f"resume={directory}", f"hydra.run.dir={directory}"]
    cli_run(resuming, monkeypatch)
    assert [row["round"] for row in read_rows(directory)] == ["1", "2"]
    assert load_checkpoint(directory / CHECKPOINT_NAME)["completed_rounds"] == 2


# Two sweeps into one directory ------------------------------------------------------------------


def test_a_second_sweep_into_a_sweep_directory_is_refused_before_hydra_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """The first sweep holds its directory's lock while its jobs run; a second sweep (basic or
    joblib launcher) is refused in one line while it runs and, by its results, after it ended;
    nothing of the first changes, and its report stays the same."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    sweep = tmp_path / "sweep"
    lock_during_jobs = []
    real_run_job = cli.run_job

    def run_job(job: Any, output_dir: Path) -> dict[str, Any]:
        lock_during_jobs.append((sweep / run_dir.LOCK_NAME).read_text().strip())
        return real_run_job(job, output_dir)

    monkeypatch.setattr(cli, "run_job", run_job)
    cli_run(["-m", *TINY, "fl.rounds=1", "seed=0,1", f"hydra.sweep.dir={sweep}"], monkeypatch)
    assert lock_during_jobs == [str(os.getpid())] * 2
    assert not (sweep / run_dir.LOCK_NAME).exists()  # released when the sweep ended
    assert report_main([str(sweep)]) == 0
    report, before = (sweep / "report.md").read_text(), snapshot(sweep)
    capsys.readouterr()

    second = ["-m", *TINY, "fl.rounds=1", "seed=2,3", f"hydra.sweep.dir={sweep}"]
    for launcher in ([], ["hydra/launcher=joblib"]):
        holder = hold_lock(sweep)  # the first sweep, still running
        try:
            code, err = cli_exit([*second, *launcher], monkeypatch, capsys)
        finally:
            holder.send_signal(signal.SIGKILL)
            holder.wait()
        assert code == 2
        assert_one_line(err, rf"hydra.sweep.dir={sweep} is being written by another fedlight run")
        (sweep / run_dir.LOCK_NAME).unlink()  # the crashed holder's file
        code, err = cli_exit([*second, *launcher], monkeypatch, capsys)
        assert code == 2
        assert_one_line(
            err,
            rf"hydra.sweep.dir={sweep} holds the results of an earlier sweep "
            rf"\({sweep / '0' / CHECKPOINT_NAME}\); continue that sweep with resume=auto, "
            "choose another directory, or give overwrite=true",
        )
        assert snapshot(sweep) == before
    assert report_main([str(sweep)]) == 0
    assert (sweep / "report.md").read_text() == report


# Links planted in a run directory ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name", [run_dir.LOCK_NAME, "checkpoint.tmp", "metrics.csv", "summary.json", ".hydra"]
)
@pytest.mark.parametrize("multirun", [False, True], ids=["run", "sweep"])
def test_a_link_in_a_run_directory_is_refused_naming_it_and_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, name: str, multirun: bool
) -> None:
    secret, elsewhere = tmp_path / "secret", tmp_path / "elsewhere"
    secret.write_text(SECRET)
    elsewhere.mkdir()
    top = tmp_path / "out"
    directory = top / "0" if multirun else top
    directory.mkdir(parents=True)
    link = directory / name
    link.symlink_to(elsewhere if name == ".hydra" else secret)
    before = snapshot(tmp_path)
    args = ["-m", "seed=0", f"hydra.sweep.dir={top}"] if multirun else [f"hydra.run.dir={top}"]
    code, err = cli_exit([*TINY, *args], monkeypatch, capsys)
    assert code == 2
    assert_one_line(
        err,
        rf"^fedlight: error: {re.escape(str(link))} is a symbolic link to "
        rf"{re.escape(str(link.readlink()))}; fedlight writes no file of a run directory "
        r"through a link: remove it, or choose another directory$",
    )
    assert "outside" not in err  # nothing of the file it points to was read
    assert snapshot(tmp_path) == before  # nothing written, here or there


def test_files_made_during_a_run_are_never_written_through_a_link(tmp_path: Path) -> None:
    """Links planted after the run's start: the checkpoint's temporary file is refused, metrics.csv
    is replaced by a file of its own; a stale temporary of a killed run is replaced."""
    secret = tmp_path / "secret"
    secret.write_text(SECRET)
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint.tmp").symlink_to(secret)
    linked = re.escape(str(run / "checkpoint.tmp"))
    with pytest.raises(ConfigError, match=rf"^{linked} is a symbolic link"):
        save_checkpoint(run / CHECKPOINT_NAME, {"round": torch.tensor(1)})
    assert not (run / CHECKPOINT_NAME).exists()
    (run / "checkpoint.tmp").unlink()
    (run / "checkpoint.tmp").write_bytes(b"left by a killed run")
    save_checkpoint(run / CHECKPOINT_NAME, {"round": torch.tensor(1)})
    assert load_checkpoint(run / CHECKPOINT_NAME)["round"] == 1
    assert not (run / "checkpoint.tmp").exists()

    (run / "metrics.csv").symlink_to(secret)
    logger = CSVLogger()
    logger.start(RunInfo(run, {}, {}, None, 1))
    logger.finish({})
    assert not (run / "metrics.csv").is_symlink()
    assert (run / "metrics.csv").read_text().startswith("round,")
    assert secret.read_text() == SECRET


def test_a_lock_file_with_another_name_is_refused(tmp_path: Path) -> None:
    """A hard link planted as the lock file would have the pid written into the other file."""
    secret, run = tmp_path / "secret", tmp_path / "run"
    secret.write_text(SECRET)
    run.mkdir()
    os.link(secret, run / run_dir.LOCK_NAME)
    with pytest.raises(ConfigError, match=r"is not a lock file fedlight made"):
        run_dir.acquire(run, "hydra.run.dir")
    assert secret.read_text() == SECRET


# A full disk ------------------------------------------------------------------------------------


class FullDisk:
    """A file on a disk that fills after `room` bytes: the write that does not fit raises ENOSPC
    (after writing what fits), as the kernel's write does."""

    def __init__(self, file: Any, room: int) -> None:
        self.file, self.room = file, room

    def write(self, data: bytes) -> int:
        if len(data) > self.room:
            self.file.write(bytes(data[: self.room]))
            self.room = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self.file.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.file, name)


def filling_disk(full: Callable[[str], bool]) -> Callable[..., None]:
    """torch.save, with each file whose temporary name makes `full` true on a disk that fills."""
    real_save = torch.save

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        named = isinstance(f, str | os.PathLike)
        if not full(str(f) if named else os.readlink(f"/proc/self/fd/{f.fileno()}")):
            return real_save(obj, f, *args, **kwargs)
        if named:
            with open(f, "wb") as file:
                return real_save(obj, FullDisk(file, 4096), *args, **kwargs)
        return real_save(obj, FullDisk(f, 4096), *args, **kwargs)

    return save


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="names files by /proc/self/fd")
@pytest.mark.parametrize(
    ("overrides", "stem", "nth", "written"),
    [
        ([], "checkpoint", 2, r"checkpoint[.]pt"),  # the second checkpoint
        (["algo=scaffold", "fl.client_state=disk"], "2", 1, r"client_states/\d+/2[.]pt"),
    ],
    ids=["checkpoint", "client_state"],
)
def test_a_full_disk_is_one_line_and_keeps_the_previous_checkpoint(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys,
    overrides: list[str],
    stem: str,
    nth: int,
    written: str,
) -> None:
    """The `nth` file written under the temporary name `<stem>.tmp` (the second checkpoint, a
    client state of round 2) meets a full disk."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    directory = tmp_path / "run"
    stems: list[str] = []

    def full(name: str) -> bool:
        stems.append(Path(name).stem)
        return stems.count(stem) == nth and stems[-1] == stem

    monkeypatch.setattr(torch, "save", filling_disk(full))
    args = [*TINY, "fl.rounds=3", *overrides, f"hydra.run.dir={directory}"]
    code, err = cli_exit(args, monkeypatch, capsys)
    assert code == 1
    where = re.escape(str(directory))
    errors = [line for line in err.splitlines() if "error" in line.lower()]  # beside the rounds
    assert len(errors) == 1 and "Traceback" not in err, err
    assert_one_line(
        errors[0],
        rf"^fedlight: error: {where}/{written} cannot be written: No space left on device; "
        rf"checkpoint.pt keeps the last checkpointed round: once that is fixed, continue with "
        rf"resume={where} hydra.run.dir={where}$",
    )
    assert not list(directory.rglob("*.tmp"))  # no partial file left
    checkpoint = load_checkpoint(directory / CHECKPOINT_NAME)
    assert checkpoint["completed_rounds"] == 1
    for client, round_index in checkpoint["client_states"].items():  # the disk store's versions
        if isinstance(round_index, int):
            assert (directory / "client_states" / client / f"{round_index}.pt").is_file()
