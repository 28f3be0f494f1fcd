"""Failure modes: one writer per run directory, rounds without data, one-line faults (exit 2),
divergence (exit 3), Ctrl-C's resume hint, and resume semantics (extending a finished run)."""

import csv
import itertools
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import open_dict

from fedlight.cli import main as cli
from fedlight.cli.job import build_job, group_choices
from fedlight.core.errors import ConfigError
from fedlight.drivers.synchronous import FederatedLoop
from fedlight.runs import run_dir
from fedlight.runs.experiment import resumed_checkpoint, run_job
from fedlight.runs.federation import warn_of_empty_clients
from fedlight.runs.job import DivergenceError, Job
from fedlight.runs.same_config import comparable_config
from fedlight.store.checkpoint import load_checkpoint
from fedlight.store.run_files import CHECKPOINT_NAME
from tests.conftest import TINY, compose_config, rows_without_timings

EMPTY = ["fl.num_clients=5000", "fl.clients_per_round=2"]  # digits: ~70% of the clients empty


def read_rows(directory: Path) -> list[dict[str, str]]:
    with (directory / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def cli_exit(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys) -> tuple[int, str]:
    """The CLI's exit code and stderr for a command refused before Hydra starts (in process)."""
    monkeypatch.setattr(sys, "argv", ["fedlight", *args])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    return int(exited.value.code), capsys.readouterr().err


def assert_one_line(stderr: str, pattern: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert lines[0].startswith("fedlight: error: "), lines[0]
    assert re.search(pattern, lines[0]), lines[0]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 3-round TINY run with eval.every=2 (rows 2 and 3) and its checkpoint, on one
    worker as `make_job`'s runs it is compared with (another worker count rounds otherwise)."""
    directory = tmp_path_factory.mktemp("finished") / "run"
    cfg = compose_config([*TINY, "fl.rounds=3", "eval.every=2", "fl.workers=1"])
    choices = group_choices(cfg, cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]
    run_job(build_job(cfg, choices), directory)
    return directory


# One writer per run directory -------------------------------------------------------------------

HOLDER = """
import sys, time
from pathlib import Path
from fedlight.runs import run_dir
run_dir.acquire(Path(sys.argv[1]), "hydra.run.dir")
print("locked", flush=True)
time.sleep(120)
"""


def hold_lock(directory: Path) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(directory)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    return holder


def test_a_second_writer_is_refused_naming_the_holder_and_a_dead_holder_is_taken_over(
    tmp_path: Path, capsys
) -> None:
    directory = tmp_path / "run"
    holder = hold_lock(directory)
    try:
        with pytest.raises(ConfigError, match=rf"pid {holder.pid}, lock .*\.fedlight\.lock\)"):
            run_dir.acquire(directory, "hydra.run.dir")
    finally:
        holder.send_signal(signal.SIGKILL)  # a crash: the kernel drops its lock, the file stays
        holder.wait()
    assert (directory / run_dir.LOCK_NAME).read_text().strip() == str(holder.pid)
    with run_dir.locked(directory, "hydra.run.dir"):
        assert (directory / run_dir.LOCK_NAME).read_text().strip() == str(os.getpid())
    assert f"left locked by process {holder.pid}, which has ended" in capsys.readouterr().err
    assert not (directory / run_dir.LOCK_NAME).exists()  # released: the file is gone


def test_the_cli_refuses_a_run_directory_another_run_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    directory = tmp_path / "run"
    holder = hold_lock(directory)
    try:
        code, err = cli_exit([*TINY, f"hydra.run.dir={directory}"], monkeypatch, capsys)
    finally:
        holder.kill()
        holder.wait()
    assert code == 2
    assert_one_line(
        err,
        re.escape(
            f"hydra.run.dir={directory} is being written by another fedlight run (pid "
            f"{holder.pid}, lock {directory / run_dir.LOCK_NAME}); wait for it to end, or choose "
            "another directory"
        ),
    )
    assert sorted(p.name for p in directory.iterdir()) == [run_dir.LOCK_NAME]  # nothing written


@pytest.mark.parametrize("where", ["a_file", "/proc/fedlight/run"])
def test_an_impossible_run_directory_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, where: str
) -> None:
    (tmp_path / "a_file").write_text("")
    target = tmp_path / where if where == "a_file" else Path(where)
    code, err = cli_exit([*TINY, f"hydra.run.dir={target}"], monkeypatch, capsys)
    assert code == 2
    assert_one_line(err, rf"hydra.run.dir={target} cannot be written: .*choose a writable")


# Rounds without data ----------------------------------------------------------------------------


def test_a_round_whose_clients_hold_no_data_keeps_the_model_and_the_run_goes_on(
    make_job: Callable[[list[str]], Job], tmp_path: Path, capsys
) -> None:
    run_job(make_job([*TINY, *EMPTY]), tmp_path / "run")
    rows = read_rows(tmp_path / "run")
    assert len(rows) == 4 and "clients_without_data" in rows[0]
    empty = [r for r in rows if r["clients_without_data"] == "2.0"]
    assert empty, "the seed gives rounds of only empty clients"
    for row in empty:
        assert math.isnan(float(row["train_loss"]))
        assert row["bytes_up"] == row["bytes_down"] == "0"  # nobody was sent anything
    # a round of only empty clients leaves the global model as it was
    for before, after in itertools.pairwise(rows):
        if after in empty:
            assert after["test_loss"] == before["test_loss"]
    assert "the partition leaves" in capsys.readouterr().err


def test_a_partition_with_many_empty_clients_warns_once_with_the_count(capsys) -> None:
    sets = [np.arange(3)] * 8 + [np.arange(0)] * 2
    warn_of_empty_clients(sets)
    assert "leaves 2 of 10 clients without data (20%)" in capsys.readouterr().err
    warn_of_empty_clients([np.arange(3)] * 10 + [np.arange(0)])  # 1 of 11: under 10%
    assert capsys.readouterr().err == ""


def test_threads_per_worker_applies_to_one_worker(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    original = FederatedLoop.run_round

    def run_round(self: FederatedLoop, round_index: int):
        seen.append(torch.get_num_threads())
        return original(self, round_index)

    monkeypatch.setattr(FederatedLoop, "run_round", run_round)
    outside = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        run_job(make_job([*TINY, "fl.rounds=2", "fl.threads_per_worker=1"]), tmp_path / "run")
        assert seen == [1, 1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(outside)


# One-line refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["optim.lr=inf"], "optim.lr=inf"),
        (["optim.weight_decay=inf"], "optim.weight_decay=inf"),
        (["partition=dirichlet", "partition.alpha=inf"], "partition.alpha=inf"),
        (["algo=fedprox", "algo.mu=nan"], "algo.mu=nan"),
    ],
)
def test_non_finite_numbers_are_refused(
    monkeypatch: pytest.MonkeyPatch, capsys, overrides: list[str], key: str
) -> None:
    code, err = cli_exit([*TINY, *overrides], monkeypatch, capsys)
    assert code == 2
    assert_one_line(err, rf"{key} is not a finite number")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_cuda_without_a_gpu_is_refused(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    code, err = cli_exit([*TINY, "device=cuda"], monkeypatch, capsys)
    assert code == 2
    assert_one_line(err, r"device=cuda but torch sees no CUDA GPU; use device=cpu or auto")


def damaged_checkpoints(tmp_path: Path, finished: Path) -> dict[str, tuple[Path, str]]:
    """Each resume fault: the directory to give `resume=` and what the one line must say."""
    good = (finished / CHECKPOINT_NAME).read_bytes()
    faults = {
        "missing": (tmp_path / "nowhere", r"no such directory"),
        "no_checkpoint": (tmp_path / "empty", r"checkpoint.pt does not exist"),
        "the_file": (finished / CHECKPOINT_NAME, r"is a file.*give its directory: resume="),
        "truncated": (tmp_path / "truncated", r"not a complete checkpoint \(1000 bytes"),
        "random": (tmp_path / "random", r"not a complete checkpoint"),
        "empty_file": (tmp_path / "zero", r"not a complete checkpoint \(0 bytes"),
        "older": (tmp_path / "older", r"lacks diverged_at_round, divergence \(written by an older"),
    }
    (tmp_path / "empty").mkdir()
    for name, content in [
        ("truncated", good[:1000]),
        ("random", np.random.default_rng(0).bytes(5000)),
        ("zero", b""),
    ]:
        (tmp_path / name).mkdir()
        (tmp_path / name / CHECKPOINT_NAME).write_bytes(content)
    older = load_checkpoint(finished / CHECKPOINT_NAME)
    del older["diverged_at_round"], older["divergence"]
    (tmp_path / "older").mkdir()
    torch.save(older, tmp_path / "older" / CHECKPOINT_NAME)
    assert zipfile.is_zipfile(tmp_path / "older" / CHECKPOINT_NAME)
    return faults


def test_every_resume_fault_is_one_line_before_any_work(
    tmp_path: Path, finished: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    for resume, message in damaged_checkpoints(tmp_path, finished).values():
        out = tmp_path / f"out_{resume.name}"
        args = [*TINY, "fl.rounds=3", "eval.every=2", f"resume={resume}", f"hydra.run.dir={out}"]
        code, err = cli_exit(args, monkeypatch, capsys)
        assert code == 2
        assert_one_line(err, rf"^fedlight: error: resume={resume}.*{message}")
        assert not out.exists()  # nothing made: the checkpoint is checked before the data


class RunsCode:
    """Unpickling this runs a shell command: what a hostile checkpoint.pt would hold."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def test_a_checkpoint_that_would_run_code_is_refused_without_running_it(
    tmp_path: Path, finished: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    hostile = load_checkpoint(finished / CHECKPOINT_NAME)
    hostile["rows"] = RunsCode(tmp_path / "ran")
    (tmp_path / "hostile").mkdir()
    torch.save(hostile, tmp_path / "hostile" / CHECKPOINT_NAME)
    args = [*TINY, "fl.rounds=3", "eval.every=2", f"resume={tmp_path / 'hostile'}"]
    code, err = cli_exit(args, monkeypatch, capsys)
    assert code == 2
    assert_one_line(err, r"cannot be read \(UnpicklingError: Weights only load failed")
    assert not (tmp_path / "ran").exists()


def test_a_changed_setting_is_named_as_the_user_wrote_it(
    make_job: Callable[[list[str]], Job], finished: Path
) -> None:
    base = [*TINY, "fl.rounds=3", "eval.every=2", f"resume={finished}"]
    # model.lr interpolates optim.lr and sorts first: the message names the key the user wrote
    with pytest.raises(ConfigError, match=r"config differs at optim.lr \(checkpoint 0.05, now 0.1"):
        resumed_checkpoint(make_job([*base, "optim.lr=0.1"]))
    with pytest.raises(ConfigError, match=r"^fl.rounds=2 but resume=.* has completed 3 rounds"):
        resumed_checkpoint(make_job([*base, "fl.rounds=2"]))
    # settings that change no number may differ
    assert resumed_checkpoint(make_job([*base, "checkpoint.every=5", "fl.rounds=9"])) is not None


def test_a_checkpoint_from_before_a_setting_existed_resumes_at_its_default(
    make_job: Callable[[list[str]], Job], finished: Path, tmp_path: Path
) -> None:
    """A run checkpointed before fedlight added a setting lacks it in its config; a resume that
    leaves the setting at its default continues, one that sets it (or lacks a group option) is
    refused in one line."""
    older = load_checkpoint(finished / CHECKPOINT_NAME)
    config = json.loads(older["config"])
    del config["fl"]["client_state_memory_mb"]
    older["config"] = json.dumps(config)
    (tmp_path / "older").mkdir()
    torch.save(older, tmp_path / "older" / CHECKPOINT_NAME)
    base = [*TINY, "fl.rounds=3", "eval.every=2", f"resume={tmp_path / 'older'}"]
    assert resumed_checkpoint(make_job(base)) is not None
    with pytest.raises(
        ConfigError,
        match=r"config differs at fl.client_state_memory_mb \(checkpoint absent, now 1.0\)",
    ):
        resumed_checkpoint(make_job([*base, "fl.client_state_memory_mb=1"]))
    algo_key = next(iter(config["algo"]))
    del config["algo"][algo_key]
    older["config"] = json.dumps(config)
    torch.save(older, tmp_path / "older" / CHECKPOINT_NAME)
    with pytest.raises(
        ConfigError, match=rf"config differs at algo.{algo_key} \(checkpoint absent"
    ):
        resumed_checkpoint(make_job(base))


def test_a_data_root_with_a_trailing_slash_is_the_same_place() -> None:
    a = comparable_config({"data": {"root": "../shared/data/"}})
    assert a == comparable_config({"data": {"root": "../shared/data"}})


# Resume semantics -------------------------------------------------------------------------------


def test_extending_a_finished_run_equals_the_longer_run(
    make_job: Callable[[list[str]], Job], tmp_path: Path, finished: Path
) -> None:
    longer = [*TINY, "fl.rounds=5", "eval.every=2"]
    run_job(make_job(longer), tmp_path / "full")
    run_job(make_job([*longer, f"resume={finished}"]), tmp_path / "extended")
    # the 3-round run evaluated round 3 because it was its last; the 5-round run does not
    rows = read_rows(tmp_path / "extended")
    assert [r["round"] for r in rows] == ["1", "2", "3", "4", "5"]
    assert [r["round"] for r in rows if r["test_accuracy"]] == ["2", "4", "5"]
    assert rows_without_timings(tmp_path / "extended") == rows_without_timings(tmp_path / "full")
    full = load_checkpoint(tmp_path / "full" / CHECKPOINT_NAME)["server_weights"]
    extended = load_checkpoint(tmp_path / "extended" / CHECKPOINT_NAME)["server_weights"]
    assert all(torch.equal(full[k], extended[k]) for k in full)


def test_resuming_a_finished_run_elsewhere_writes_its_checkpoint_there(
    make_job: Callable[[list[str]], Job], tmp_path: Path, finished: Path
) -> None:
    run_job(make_job([*TINY, "fl.rounds=3", "eval.every=2", f"resume={finished}"]), tmp_path / "b")
    copied = load_checkpoint(tmp_path / "b" / CHECKPOINT_NAME)
    original = load_checkpoint(finished / CHECKPOINT_NAME)
    assert copied["completed_rounds"] == 3 and copied["rows"] == original["rows"]
    run_job(
        make_job([*TINY, "fl.rounds=4", "eval.every=2", f"resume={tmp_path / 'b'}"]), tmp_path / "c"
    )
    assert [r["round"] for r in read_rows(tmp_path / "c") if r["test_accuracy"]] == ["2", "4"]


# Divergence -------------------------------------------------------------------------------------

DIVERGING = [*TINY, "optim.lr=1e6", "fl.rounds=4"]


def test_a_diverged_run_stops_at_that_round_and_keeps_the_last_good_checkpoint(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A weight becomes nan in round 3: the run stops there, logs it, keeps round 2's checkpoint."""
    original = FederatedLoop.run_round

    def run_round(self: FederatedLoop, round_index: int):
        stats = original(self, round_index)
        if round_index == 3:
            next(iter(self.server.weights.values())).view(-1)[0] = math.nan
        return stats

    monkeypatch.setattr(FederatedLoop, "run_round", run_round)
    with pytest.raises(DivergenceError, match=r"^the run diverged at round 3 \(weights ") as raised:
        run_job(make_job([*TINY, "fl.rounds=5"]), tmp_path / "run")
    assert "\n" not in str(raised.value)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["diverged_at_round"] == 3 == summary["rounds"]
    assert summary["divergence"].endswith("not finite")
    assert [r["round"] for r in read_rows(tmp_path / "run")] == ["1", "2", "3"]
    checkpoint = load_checkpoint(tmp_path / "run" / CHECKPOINT_NAME)
    assert checkpoint["completed_rounds"] == 2  # the last good round
    assert all(t.isfinite().all() for t in checkpoint["server_weights"].values())


def test_on_divergence_continue_goes_on_and_records_the_round(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    summary = run_job(make_job([*DIVERGING, "fl.on_divergence=continue"]), tmp_path / "run")
    assert summary["rounds"] == 4 and summary["diverged_at_round"] is not None
    json.loads((tmp_path / "run" / "summary.json").read_text(), parse_constant=pytest.fail)


def test_the_cli_exits_3_on_divergence_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Through the whole CLI, Hydra included, in this process."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    run = tmp_path / "run"
    code, err = cli_exit([*DIVERGING, f"hydra.run.dir={run}"], monkeypatch, capsys)
    assert code == 3
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("fedlight: error: the run diverged at round")
    assert json.loads((run / "summary.json").read_text())["diverged_at_round"] is not None
    assert not (run / run_dir.LOCK_NAME).exists()


def test_a_diverged_job_of_a_sweep_is_said_and_the_next_job_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("WANDB_MODE", "disabled")
    sweep = tmp_path / "sweep"
    args = ["-m", *TINY, "fl.rounds=3", "optim.lr=1e6,0.05", f"hydra.sweep.dir={sweep}"]
    monkeypatch.setattr(sys, "argv", ["fedlight", *args])
    cli.main()  # returns: the sweep ran to its end
    summaries = [json.loads((sweep / job / "summary.json").read_text()) for job in ("0", "1")]
    assert summaries[0]["diverged_at_round"] is not None
    assert summaries[1]["diverged_at_round"] is None and summaries[1]["rounds"] == 3
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if f"{sweep / '0'}: the run diverged" in line]
    assert len(said) == 1 and said[0].startswith(f"fedlight: {sweep / '0'}: the run diverged")
    # where the sweep stands, as each job starts and ends (`fedlight.loggers.console`)
    assert f"fedlight: sweep {sweep}: 1 of 2 done (0 failed, 1 diverged), 1 running, 0 left" in err


def test_ctrl_c_exits_130_with_the_command_to_go_on(tmp_path: Path) -> None:
    run = tmp_path / "interrupted"
    args = [*TINY, "fl.rounds=100000", f"hydra.run.dir={run}"]
    env = {**os.environ, "WANDB_MODE": "disabled"}
    process = subprocess.Popen(
        [sys.executable, "-m", "fedlight", *args],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        # A suite started in the background by a non-interactive shell ignores SIGINT, and the
        # child would inherit that: Python turns SIGINT into KeyboardInterrupt only from SIG_DFL.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while not (run / CHECKPOINT_NAME).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert "Traceback" not in stderr
    assert last.startswith("fedlight: interrupted; continue from its last checkpoint with: ")
    command = shlex.split(last.split(" with: ", 1)[1])
    assert command[:3] == ["python", "-m", "fedlight"]
    # resume= alone: the run's own overrides are reapplied from its .hydra/overrides.yaml
    assert command[3:] == [f"resume={run}", f"hydra.run.dir={run}"]
    assert not (run / run_dir.LOCK_NAME).exists()
