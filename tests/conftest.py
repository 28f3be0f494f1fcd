"""Shared helpers: compose the real Hydra config into typed jobs, run the real CLI."""

import csv
import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

from fedlight.cli.job import build_job, group_choices
from fedlight.cli.schema import CONF_DIR, register_configs
from fedlight.drivers.base import Driver
from fedlight.drivers.synchronous import FederatedLoop
from fedlight.loggers.base import is_timing
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job

register_configs()

# Decoded-image caches (data.cache_dir's default, the user's cache) go to a folder of the test
# run's own, here and in the processes tests start, never to the user's ~/.cache.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="fedlight-test-cache-")

if "PYTEST_XDIST_WORKER" in os.environ:
    # A parallel run (`pytest -n`) already fills the cores with test processes: one torch thread
    # each, in them and in the processes they start, instead of every one taking all cores.
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]
# Small and fast: 10 digits clients, 4 rounds of a few local steps each.
TINY = [
    "data=digits",
    "model=mlp",
    "fl.num_clients=10",
    "fl.clients_per_round=4",
    "fl.rounds=4",
    "local.batch_size=32",
    "checkpoint.every=1",
]


def compose_config(overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose("config", overrides=overrides, return_hydra_config=True)


@pytest.fixture(autouse=True)
def frozen_heap() -> None:
    """The objects alive before a test (torch, Hydra, the test modules) are left out of the
    cyclic collector's walks (CPython's `gc.freeze`), so that a run's `gc.collect()` walks the
    run's objects, not this process's millions (tests/stages on 2 workers: 26 s of collection
    without, 8 s with); frozen once, and again after a run that forked workers unfroze them
    (`frozen_for_fork`)."""
    if gc.get_freeze_count() == 0:
        gc.collect()
        gc.freeze()


@pytest.fixture
def make_job():
    """Jobs run in the test's process (`fl.workers=1`) unless the overrides name `fl.workers`:
    a test that patches or captures this process sees the run, whatever threads it has."""

    def make(overrides: list[str]) -> Job:
        if not any(o.startswith("fl.workers=") for o in overrides):
            overrides = [*overrides, "fl.workers=1"]
        cfg = compose_config(overrides)
        choices = group_choices(cfg, cfg.hydra.runtime.choices)  # as the CLI records them
        with open_dict(cfg):
            del cfg["hydra"]
        return build_job(cfg, choices)

    return make


def without_timings(rows: Iterable[dict[str, str]]) -> list[dict[str, str]]:
    return [{k: v for k, v in row.items() if not is_timing(k)} for row in rows]


def rows_without_timings(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return without_timings(csv.DictReader(f))


class CliServer:
    """The test process's tests/helpers/cli_server.py, started on first use: each command a fork of
    a process that has imported fedlight already (see there)."""

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None

    def run(
        self, args: Sequence[str], cwd: Path, env: dict[str, str]
    ) -> subprocess.CompletedProcess:
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen(
                [sys.executable, str(REPO / "tests" / "helpers" / "cli_server.py")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env={**os.environ, "PYTHONPATH": env["PYTHONPATH"]},
                text=True,
            )
        with tempfile.TemporaryDirectory() as out:
            request = {"argv": list(args), "cwd": str(cwd), "env": env}
            request |= {"stdout": f"{out}/stdout", "stderr": f"{out}/stderr"}
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            pid = json.loads(self.answer())["pid"]
            timed_out = threading.Event()
            watchdog = threading.Timer(300, lambda: (timed_out.set(), os.kill(pid, signal.SIGKILL)))
            watchdog.start()
            returncode = json.loads(self.answer())["returncode"]
            watchdog.cancel()
            if timed_out.is_set():
                raise TimeoutError(f"fedlight {args} took more than 300 s")
            texts = [Path(out, name).read_text(errors="replace") for name in ("stdout", "stderr")]
        return subprocess.CompletedProcess(["fedlight", *args], returncode, *texts)

    def answer(self) -> str:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(
                "tests/helpers/cli_server.py died; its stderr is in the test's output"
            )
        return line


CLI_SERVER = CliServer()


def run_cli(
    *args: str,
    cwd: Path,
    check: bool = True,
    launcher: Sequence[str] = (),
    threads: int | None = None,
    fresh: bool = False,
) -> subprocess.CompletedProcess:
    """`python [launcher] -m fedlight args`; `launcher` e.g. torchrun's module and its flags;
    `threads`: the process's torch threads (OMP_NUM_THREADS; None: this process's setting). The
    fedlight of this checkout, not whichever the environment has installed (a worktree shares
    its virtual environment with the checkout it was added from). Without a launcher the command
    is a fork of tests/helpers/cli_server.py (fedlight imported once); `fresh`: a new
    interpreter."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "WANDB_MODE": "disabled", "HYDRA_FULL_ERROR": "0", "PYTHONPATH": path}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    if launcher or fresh:
        result = subprocess.run(
            [sys.executable, *launcher, "-m", "fedlight", *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    else:
        result = CLI_SERVER.run(args, cwd, env)
    if check and result.returncode != 0:
        raise AssertionError(f"fedlight {args} failed:\n{result.stdout}\n{result.stderr}")
    return result


def run_killed_in_round(
    job: Job,
    run_dir: Path,
    kill_round: int,
    monkeypatch: pytest.MonkeyPatch,
    driver: type[Driver] = FederatedLoop,
) -> None:
    """Run a job that is killed (KeyboardInterrupt) as it starts round `kill_round` (of the
    `driver` that runs it)."""
    original_round = driver.run_round

    def run_round(self: Driver, round_index: int):
        if round_index == kill_round:
            raise KeyboardInterrupt
        return original_round(self, round_index)

    with monkeypatch.context() as patch:
        patch.setattr(driver, "run_round", run_round)
        with pytest.raises(KeyboardInterrupt):
            run_job(job, run_dir)
