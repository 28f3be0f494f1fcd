"""Long sweeps that survive (`fedlight.runs.resume`, `fedlight.drivers.preemption`,
`fedlight.store.sweeps`): a
sweep killed half-way resumes with one command, a preemption signal ends a run with its checkpoint
and exit 75 and the run continues on its own, under Hydra's basic and joblib launchers and
submitit's
requeue (its local executor stands in for SLURM here)."""

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fedlight.cli.jobs import given_value
from fedlight.cli.output import JobFailedError, continue_command, interrupted, job_failed
from fedlight.core.errors import ConfigError
from fedlight.core.settings import RunSettings
from fedlight.drivers.preemption import PREEMPTED_EXIT_CODE
from fedlight.runs import run_dir
from fedlight.runs.resume import decide, resume_command
from fedlight.store.run_files import (
    CHECKPOINT_NAME,
    ERROR_NAME,
    PREEMPTED_NAME,
    SUMMARY_NAME,
    lock_holder,
)
from fedlight.store.sweeps import COMMAND_VARIABLE, JobStatus, job_state, sweep_states
from tests.conftest import REPO, TINY, rows_without_timings, run_cli

# Four seeds of a run long enough to be caught half-way (a checkpoint every round).
SWEEP = [*TINY, "fl.rounds=20", "fl.workers=1", "seed=0,1,2,3"]
RUN = [*TINY, "fl.rounds=30"]
RESULT_FILES = (SUMMARY_NAME, "metrics.csv", CHECKPOINT_NAME, "model.pt", "console.log")


def started(args: list[str], cwd: Path, prelude: str = "") -> subprocess.Popen:
    """`python -m fedlight args` in the background (after `prelude`, Python run first in the
    same process), its output kept."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": path}
    run = f"import sys\nfrom fedlight.cli.entry import main\nsys.argv = ['fedlight', *{args!r}]\n"
    code = f"{prelude}\n{run}main()"
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a signal to it alone, as a scheduler sends one
    )


def wait_for(condition: Callable[[], bool], process: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 240
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"ended before {what}:\n{process.communicate()[1]}")
        assert time.monotonic() < deadline, f"no {what} within 240 s"
        time.sleep(0.02)


def logged(directory: Path) -> int:
    return job_state(directory).rounds_logged


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {
        n: ((directory / n).read_bytes(), (directory / n).stat().st_mtime_ns) for n in RESULT_FILES
    }


def same_metrics(left: Path, right: Path) -> None:
    for job in sorted(p.name for p in right.iterdir() if (p / ".hydra").is_dir()):
        assert rows_without_timings(left / job) == rows_without_timings(right / job), job


def finished_and_half_way(sweep: Path) -> bool:
    """A job finished and another one half-way (3 to 15 of its 20 rounds logged)."""
    states = sweep_states(sweep)
    half_way = [s for s in states if not s.done and 3 <= s.rounds_logged <= 15]
    return any(s.done for s in states) and bool(half_way)


@pytest.mark.parametrize(
    "launcher",
    [
        [],
        pytest.param(["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], marks=pytest.mark.slow),
    ],
    ids=["basic", "joblib"],
)
def test_a_killed_sweep_resumes_with_one_command(tmp_path: Path, launcher: list[str]) -> None:
    """SIGKILL of the sweep's process group once a job finished and another is half-way:
    `fedlight resume` leaves the finished job's files as they are, continues the half-way one
    from its checkpoint and runs the rest; every metrics.csv equals that of a sweep never
    interrupted. The same sweep with another config is then refused in one line."""
    sweep = tmp_path / "sweep"
    process = started(["-m", *SWEEP, *launcher, f"hydra.sweep.dir={sweep}"], tmp_path)
    wait_for(lambda: finished_and_half_way(sweep), process, "a job finished and one half-way")
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    before = sweep_states(sweep)
    finished = {s.directory.name: snapshot(s.directory) for s in before if s.done}
    stopped = [s.directory.name for s in before if s.status is JobStatus.STOPPED]
    assert finished and stopped, before
    run_cli("report", str(sweep), cwd=tmp_path)
    report = (sweep / "report.md").read_text()
    assert (
        "Incomplete jobs" in report and f"| {stopped[0]} | seed={stopped[0]} | stopped |" in report
    )

    resumed = run_cli("resume", str(sweep), cwd=tmp_path)

    assert "finished with this config" in resumed.stdout + resumed.stderr
    for name, files in finished.items():  # not rerun: its files untouched
        assert snapshot(sweep / name) == files, name
    after = {s.directory.name: s for s in sweep_states(sweep)}
    assert len(after) == 4 and all(s.done for s in after.values())
    assert {n for n, s in after.items() if s.summary["resumes"] == 1} == set(stopped)
    reference = tmp_path / "reference"
    run_cli("-m", *SWEEP, *launcher, f"hydra.sweep.dir={reference}", cwd=tmp_path)
    same_metrics(sweep, reference)
    other = ["-m", *SWEEP, *launcher, "optim.lr=0.2", f"hydra.sweep.dir={sweep}", "resume=auto"]
    refused = run_cli(*other, cwd=tmp_path, check=False)  # another config: refused, nothing run
    assert refused.returncode == 2
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith(f"fedlight: error: resume=auto: {sweep / '0'} holds a run of another")
    assert "(differs at optim.lr" in last


def test_fedlight_resume_rebuilds_the_command_from_hydras_record(tmp_path: Path) -> None:
    """The sweep's task overrides, its launcher and config name, its config directory where the
    user gives it too, its directory, resume=auto; not Hydra's own `hydra.mode`, nor an earlier
    `resume=`."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    record = {
        "hydra": {
            "overrides": {
                "hydra": [
                    f"hydra.sweep.dir={sweep}",
                    "hydra.mode=MULTIRUN",
                    "hydra/launcher=joblib",
                ],
                "task": ["data=digits", "seed=0,1", "resume=auto"],
            },
            "job": {"config_name": "mine"},
            "runtime": {
                "config_sources": [
                    {"path": "/x/conf", "schema": "file", "provider": "command-line"}
                ]
            },
        }
    }
    (sweep / "multirun.yaml").write_text(json.dumps(record))  # JSON is YAML
    with pytest.raises(ConfigError, match=r"records '--config-dir /x/conf', which names code"):
        resume_command(sweep)  # the configs there are the user's to vouch for
    assert resume_command(sweep, given=["--config-dir=/x/conf"]) == [
        "-m",
        "--config-name",
        "mine",
        "--config-dir",
        "/x/conf",
        "hydra/launcher=joblib",
        "data=digits",
        "seed=0,1",
        f"hydra.sweep.dir={sweep}",
        "resume=auto",
    ]
    with pytest.raises(ConfigError, match=r"neither .*multirun.yaml \(a sweep's\) nor"):
        resume_command(tmp_path / "nothing")


def slow_checkpoints(marker: Path) -> str:
    """Python that makes every checkpoint write take 1.5 s, touching `marker` as it begins."""
    return (
        "import pathlib, time\n"
        "import fedlight.drivers.base as d\n"
        "save = d.save_checkpoint\n"
        "def slow(path, state):\n"
        f"    pathlib.Path({str(marker)!r}).touch()\n"
        "    time.sleep(1.5)\n"
        "    save(path, state)\n"
        "d.save_checkpoint = slow\n"
    )


@pytest.mark.parametrize(
    ("during", "workers"),
    [
        ("round", "1"),  # two workers preempted: tests/drivers/test_worker_faults.py
        pytest.param("checkpoint", "2", marks=pytest.mark.slow),
        pytest.param("round", "2", marks=pytest.mark.slow),
        pytest.param("checkpoint", "1", marks=pytest.mark.slow),
    ],
)
def test_sigterm_checkpoints_exits_75_and_the_run_continues_on_its_own(
    tmp_path: Path, workers: str, during: str
) -> None:
    """SIGTERM during a round, or while a checkpoint is written: the run ends its round, writes
    its checkpoint and exits 75 (preempted.json says so); the same command again continues it,
    bit-exact with a run never interrupted."""
    run = tmp_path / "run"
    args = [*RUN, f"fl.workers={workers}", "fl.threads_per_worker=1", "checkpoint.every=1000"]
    marker = tmp_path / "writing"
    prelude = slow_checkpoints(marker) if during == "checkpoint" else ""
    if during == "checkpoint":  # its first checkpoint is the one a preemption asks for: every 2
        args[args.index("checkpoint.every=1000")] = "checkpoint.every=2"
    process = started([*args, f"hydra.run.dir={run}"], tmp_path, prelude)
    if during == "checkpoint":
        wait_for(marker.exists, process, "a checkpoint being written")
    else:
        wait_for(lambda: logged(run) >= 2, process, "round 2")
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=240)
    assert process.returncode == PREEMPTED_EXIT_CODE, stderr
    assert "fedlight: preempted (SIGTERM) after round " in stderr.strip().splitlines()[-1]
    stopped = json.loads((run / PREEMPTED_NAME).read_text())
    assert stopped["signal"] == "SIGTERM" and 1 <= stopped["after_round"] < 30
    assert job_state(run).status is JobStatus.STOPPED and job_state(run).preempted

    again = run_cli(*args, f"hydra.run.dir={run}", cwd=tmp_path)

    assert f"{run}: was preempted: resumes from its checkpoint" in again.stdout
    assert not (run / PREEMPTED_NAME).exists()
    assert json.loads((run / SUMMARY_NAME).read_text())["resumes"] == 1
    reference = tmp_path / "reference"
    run_cli(*args, f"hydra.run.dir={reference}", cwd=tmp_path)
    assert rows_without_timings(run) == rows_without_timings(reference)


def test_preempted_under_slurm_asks_for_a_requeue(tmp_path: Path) -> None:
    """With SLURM_JOB_ID set and no launcher handler, the checkpoint is followed by `scontrol
    requeue <job id>` (a stand-in scontrol records its arguments)."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    (bin_dir / "scontrol").chmod(0o755)
    os.environ["PATH"], path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}", os.environ["PATH"]
    os.environ["SLURM_JOB_ID"] = "4242"
    try:
        process = started([*RUN, "fl.workers=1", f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    finally:
        os.environ["PATH"] = path
        del os.environ["SLURM_JOB_ID"]
    wait_for(lambda: logged(tmp_path / "run") >= 1, process, "round 1")
    process.send_signal(signal.SIGUSR1)
    _, stderr = process.communicate(timeout=240)
    assert process.returncode == PREEMPTED_EXIT_CODE, stderr
    assert calls.read_text() == "requeue 4242\n"
    assert "fedlight: SLURM job 4242 requeued" in stderr


@pytest.mark.slow
def test_submitit_requeues_a_preempted_job_which_resumes_on_its_own(tmp_path: Path) -> None:
    """hydra-submitit-launcher's local executor, SLURM's stand-in: the job gets submitit's
    preemption signal (SIGUSR2, as `job._interrupt()` sends it) in its third round; fedlight
    finishes the round, writes the checkpoint and hands over to submitit's handler, which
    requeues the job (the launcher's `checkpoint` resubmits the same call); the requeued job
    finds preempted.json and continues: the numbers of a run never interrupted."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    args = [*TINY, "fl.rounds=300", "fl.workers=1", "checkpoint.every=1000"]
    sweep = tmp_path / "sweep"
    launcher = ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=30"]
    process = started(["-m", *args, *launcher, f"hydra.sweep.dir={sweep}"], tmp_path)
    wait_for(lambda: 2 <= logged(sweep / "0") < 100, process, "the job's round 2")
    holder = job_state(sweep / "0").holder
    assert holder is not None and holder.isdigit()
    os.kill(int(holder), signal.SIGUSR2)
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr
    logs = "".join(p.read_text() for p in (sweep / ".submitit").glob("*/*.err"))
    assert "fedlight: preempted (SIGUSR2) after round " in logs
    assert "Caught signal SIGUSR2" in logs
    assert json.loads((sweep / "0" / SUMMARY_NAME).read_text())["resumes"] == 1
    reference = tmp_path / "reference"
    run_cli(*args, f"hydra.run.dir={reference}", cwd=tmp_path)
    assert rows_without_timings(sweep / "0") == rows_without_timings(reference)


def test_a_run_resumed_in_place_counts_as_unfinished_until_it_ends(tmp_path: Path) -> None:
    """A finished run extended in place loses its old summary.json as it starts, so that `fedlight
    report` and the sweep's counts show it unfinished until it writes its new one."""
    run = tmp_path / "run"
    run.mkdir()
    (run / CHECKPOINT_NAME).write_bytes(b"")
    (run / "metrics.csv").write_text("round\n1\n")
    (run / SUMMARY_NAME).write_text(json.dumps({"rounds": 1, "diverged_at_round": None}))
    assert job_state(run).status is JobStatus.FINISHED
    run_dir.prepare(run, "hydra.run.dir", RunSettings(resume=str(run)))
    assert job_state(run).status is JobStatus.STOPPED
    assert (run / CHECKPOINT_NAME).exists() and (run / "metrics.csv").exists()


def test_a_stopped_run_whose_checkpoint_is_damaged_is_refused_not_started_again(
    tmp_path: Path,
) -> None:
    """A preempted run (requeued: its command again) or a killed one (`resume=auto`) whose
    checkpoint.pt cannot be read: refused in one line naming the file, as `resume=<dir>` refuses
    it, not started again over its rounds."""
    run = tmp_path / "run"
    run.mkdir()
    (run / CHECKPOINT_NAME).write_bytes(b"\x00" * 100)
    (run / "metrics.csv").write_text("round\n1\n2\n")
    for given, preempted in ((None, True), ("auto", True), ("auto", False)):
        (run / PREEMPTED_NAME).unlink(missing_ok=True)
        if preempted:
            (run / PREEMPTED_NAME).write_text('{"signal": "SIGTERM", "after_round": 2}\n')
        with pytest.raises(ConfigError, match=rf"{run / CHECKPOINT_NAME} cannot be read"):
            decide(given, run, lambda saved: None, 4)
    assert (run / CHECKPOINT_NAME).read_bytes() == b"\x00" * 100


AWKWARD = "my sweep, é (1)"  # a space, a comma (a sweep to Hydra), non-ASCII, brackets


def test_commands_fedlight_prints_or_runs_name_awkward_directories_as_they_are(
    tmp_path: Path,
) -> None:
    """The command `fedlight resume` runs, and those a preempted or interrupted run prints, give
    Hydra the directory itself (quoted for Hydra, then for the shell), however it is named."""
    sweep, run = tmp_path / AWKWARD, tmp_path / AWKWARD / "0"
    run.mkdir(parents=True)
    record = {"hydra": {"overrides": {"hydra": [], "task": ["data=digits"]}, "job": {}}}
    (sweep / "multirun.yaml").write_text(json.dumps(record))
    assert given_value(resume_command(sweep), "hydra.sweep.dir") == str(sweep)

    assert shlex.split(continue_command(run, str(sweep))) == ["fedlight", "resume", str(sweep)]
    started_again = shlex.split(interrupted(run, ["data=digits"]).partition(" with: ")[2])
    assert given_value(started_again, "hydra.run.dir") == str(run)
    (run / CHECKPOINT_NAME).write_bytes(b"")
    for line in (continue_command(run, None), interrupted(run, []).partition(" with: ")[2]):
        words = shlex.split(line)
        assert words[:3] == ["python", "-m", "fedlight"], words
        assert given_value(words, "resume") == given_value(words, "hydra.run.dir") == str(run)


def test_fedlight_resume_continues_a_sweep_whose_directory_hydra_would_misread(
    tmp_path: Path,
) -> None:
    sweep = tmp_path / AWKWARD
    args = ["-m", *TINY, "fl.rounds=1", "seed=0,1"]
    run_cli(*args, f"hydra.sweep.dir='{sweep}'", cwd=tmp_path)
    resumed = run_cli("resume", str(sweep), cwd=tmp_path)
    assert "2 jobs: 2 finished (not run again)" in resumed.stderr, resumed.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [AWKWARD]


def test_a_sweep_a_job_of_which_another_process_still_writes_is_refused_writing_nothing(
    tmp_path: Path,
) -> None:
    """A job directory whose lock a live process holds (a job of a killed sweep, left running
    by its launcher): `fedlight resume` of the sweep is refused in one line naming that process,
    before it announces or writes anything; nothing is written into the job's directory."""
    sweep = tmp_path / "sweep"
    run_cli("-m", *TINY, "fl.rounds=2", "seed=0,1", f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    (sweep / "0" / SUMMARY_NAME).unlink()  # stopped after its checkpoint: a resume continues it
    before = {p: p.read_bytes() for p in sorted(sweep.rglob("*")) if p.is_file()}
    run_dir.acquire(sweep / "0", "hydra.run.dir")  # this process writes job 0
    try:
        refused = run_cli("resume", str(sweep), cwd=tmp_path, check=False)
    finally:
        run_dir.release(sweep / "0")
    assert refused.returncode == 2, refused.stderr
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith(f"fedlight: error: {sweep / '0'} is being written by process ")
    assert f"process {os.getpid()}," in last and "from their checkpoints" not in refused.stderr
    assert {p: p.read_bytes() for p in sorted(sweep.rglob("*")) if p.is_file()} == before


def test_a_failed_job_writes_no_error_into_a_directory_another_process_writes(
    tmp_path: Path,
) -> None:
    """A job refused because another process holds its directory leaves that directory alone:
    its error.txt would mark a live run as failed."""
    run = tmp_path / "run"
    run.mkdir()
    hold = (
        "import sys, time\nfrom pathlib import Path\nfrom fedlight.runs import run_dir\n"
        "run_dir.acquire(Path(sys.argv[1]), 'hydra.run.dir')\nprint('held', flush=True)\n"
        "time.sleep(120)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(run)], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(JobFailedError):
            job_failed("refused", 2, True, run)
    finally:
        holder.kill()
        holder.wait()
    assert not (run / ERROR_NAME).exists()
    with pytest.raises(JobFailedError):  # its own directory: the line is kept there
        job_failed("refused", 2, True, run)
    assert (run / ERROR_NAME).read_text() == "refused\n"


@pytest.mark.slow
def test_the_jobs_of_a_joblib_sweep_end_with_its_process(tmp_path: Path) -> None:
    """SIGKILL of a joblib sweep's process alone (not its group): its jobs, in loky's worker
    processes, end within seconds (their directories' locks free) instead of running on for
    nobody, and `fedlight resume` continues them: the metrics of a sweep never interrupted."""
    sweep = tmp_path / "sweep"
    launcher = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]
    args = ["-m", *SWEEP[:-1], "fl.rounds=60", "seed=0,1", *launcher]  # both run a while
    process = started([*args, f"hydra.sweep.dir={sweep}"], tmp_path)
    try:
        wait_for(lambda: min(logged(sweep / "0"), logged(sweep / "1")) >= 2, process, "round 2")
        process.kill()
        process.wait()
        deadline = time.monotonic() + 5
        while any(lock_holder(sweep / j) for j in "01") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [job_state(sweep / j).status for j in "01"] == [JobStatus.STOPPED] * 2
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # what is left of it, if anything
    # a new interpreter: a joblib sweep run by tests/helpers/cli_server.py's fork was seen to hang
    # at exit
    run_cli("resume", str(sweep), cwd=tmp_path, fresh=True)
    reference = tmp_path / "reference"
    run_cli(*args, f"hydra.sweep.dir={reference}", cwd=tmp_path, fresh=True)
    same_metrics(sweep, reference)


def test_a_job_process_whose_command_has_died_ends_before_its_job(tmp_path: Path) -> None:
    """A worker process left by a `fedlight` command of this host that has died (killed before
    the job started in it) ends as the job starts; one whose command ran on another host
    (SLURM's environment is the submitter's) runs its job."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    check = "from fedlight.store.sweeps import end_with_command\nend_with_command()\nprint('ran')"
    for host, ends in ((socket.gethostname(), True), ("elsewhere", False)):
        env = {**os.environ, COMMAND_VARIABLE: f"{host}:{gone.pid}"}
        job = subprocess.run(
            [sys.executable, "-c", check], cwd=REPO, env=env, capture_output=True, text=True
        )
        assert (job.returncode, job.stdout) == ((-signal.SIGKILL, "") if ends else (0, "ran\n"))
        assert (f"the fedlight command {gone.pid} that started it has ended" in job.stderr) is ends


def test_a_preemption_signal_just_after_the_directory_is_locked_stops_the_run_cleanly(
    tmp_path: Path,
) -> None:
    """SIGTERM in the moment between the command locking the run directory and the run setting
    up its own watch (slowed here): the run is not killed half-way but ends its first round,
    writes its checkpoint and exits 75, and the same command continues it."""
    run, marker = tmp_path / "run", tmp_path / "locked"
    prelude = (
        "import pathlib, time\nimport fedlight.cli.main as c\nsettings = c.non_default_settings\n"
        "def slow(*args):\n"
        f"    pathlib.Path({str(marker)!r}).touch()\n"
        "    time.sleep(3)\n"
        "    return settings(*args)\n"
        "c.non_default_settings = slow\n"
    )
    args = [*RUN, "fl.workers=1"]
    process = started([*args, f"hydra.run.dir={run}"], tmp_path, prelude)
    wait_for(marker.exists, process, "the run directory locked")
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=240)
    assert process.returncode == PREEMPTED_EXIT_CODE, stderr
    assert json.loads((run / PREEMPTED_NAME).read_text())["after_round"] == 1
    again = run_cli(*args, f"hydra.run.dir={run}", cwd=tmp_path)
    assert f"{run}: was preempted: resumes from its checkpoint" in again.stdout


@pytest.mark.slow
def test_sigterm_to_a_joblib_sweeps_process_group_exits_75_with_its_jobs_checkpointed(
    tmp_path: Path,
) -> None:
    """A preemption of a joblib sweep (SIGTERM to its process group, as SLURM sends it): the
    sweep's process is not killed by it but waits for its jobs and exits 75, not 143. The first
    job to end its round writes its checkpoint and preempted.json; joblib then ends the other
    at once (it may lose its round in progress: docs/failure-modes.md); `fedlight resume`
    continues both."""
    sweep = tmp_path / "sweep"
    launcher = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]
    args = ["-m", *SWEEP[:-1], "fl.rounds=60", "seed=0,1", *launcher]  # both run a while
    process = started([*args, f"hydra.sweep.dir={sweep}"], tmp_path)
    wait_for(lambda: min(logged(sweep / "0"), logged(sweep / "1")) >= 2, process, "round 2")
    os.killpg(process.pid, signal.SIGTERM)
    _, stderr = process.communicate(timeout=240)
    assert process.returncode == PREEMPTED_EXIT_CODE, stderr
    assert any(job_state(sweep / j).preempted for j in "01")
    assert [job_state(sweep / j).status for j in "01"] == [JobStatus.STOPPED] * 2
    run_cli("resume", str(sweep), cwd=tmp_path, fresh=True)
    assert all(job_state(sweep / j).done for j in "01")
