"""Failure modes found by fault tests (issue 31, item 18), each through the CLI: one line with
the right exit code (2 bad setting or data, 1 I/O, 3 divergence), and sweeps that go on past a
failed job."""

import json
import math
import os
import re
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from fedlight.cli import entry
from fedlight.cli import main as cli
from fedlight.core.settings import MAX_THREADS
from fedlight.drivers.synchronous import FederatedLoop
from fedlight.runs.outputs import MAX_CLIENT_BARS, client_blocks, write_participation
from fedlight.store.checkpoint import load_checkpoint
from fedlight.store.client_states import CLIENT_STATES_DIR
from fedlight.store.run_files import CHECKPOINT_NAME
from tests.conftest import TINY
from tests.data.test_data import write_mnist_tree
from tests.runs.test_hardening import assert_one_line, cli_exit


@pytest.fixture(autouse=True)
def quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    """No W&B, and no network: a data fault must never turn into a download."""
    monkeypatch.setenv("WANDB_MODE", "disabled")

    def blocked(*args, **kwargs):
        raise OSError("network disabled in tests")

    monkeypatch.setattr(socket, "getaddrinfo", blocked)
    monkeypatch.setattr(socket, "create_connection", blocked)


@pytest.fixture
def deadline() -> Iterator[None]:
    """A test that must not hang fails after 60 s instead."""

    def expired(*_: object) -> None:
        raise TimeoutError("hung for 60 s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def run_exit(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys) -> tuple[int, str]:
    """The exit code (0 when the CLI returns) and stderr of a whole run, in this process
    (`capsys`, or `capfd` to see its worker processes' too)."""
    monkeypatch.setattr(sys, "argv", ["fedlight", *args])
    try:
        cli.main()
    except SystemExit as exited:
        return int(exited.code or 0), capsys.readouterr().err
    return 0, capsys.readouterr().err


def the_error(err: str) -> str:
    """The one error line of a run's stderr (its progress lines go there too), no traceback."""
    errors = [line for line in err.splitlines() if line.startswith("fedlight: error: ")]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


# A vanished client-state file ------------------------------------------------------------------


def test_a_client_state_file_deleted_during_the_run_is_said_as_such_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Another process deletes the run's client states before round 3: the run ends with one
    line saying which file vanished (not that it "cannot be written"), exit code 1."""
    original = FederatedLoop.run_round

    def run_round(self: FederatedLoop, round_index: int):
        if round_index == 3:
            for path in (tmp_path / "run" / CLIENT_STATES_DIR).rglob("*.pt"):
                path.unlink()
        return original(self, round_index)

    monkeypatch.setattr(FederatedLoop, "run_round", run_round)
    args = [*TINY, "algo=scaffold", "fl.client_state=disk", f"hydra.run.dir={tmp_path / 'run'}"]
    code, err = run_exit(args, monkeypatch, capsys)
    assert code == 1
    line = the_error(err)
    assert re.match(
        rf"fedlight: error: {tmp_path / 'run' / CLIENT_STATES_DIR}/\d+/[12]\.pt, client \d+'s "
        r"state, was deleted while the run used it \(by another process in the run directory\?"
        r"\); the run cannot go on without it: resume from the last checkpoint.pt",
        line,
    ), line
    assert "cannot be written" not in err


# Divergence and the checkpoint it leaves --------------------------------------------------------


def test_a_divergence_in_round_1_says_no_checkpoint_was_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    run = tmp_path / "run"
    code, err = run_exit([*TINY, "optim.lr=1e6", f"hydra.run.dir={run}"], monkeypatch, capsys)
    assert code == 3
    assert json.loads((run / "summary.json").read_text())["diverged_at_round"] == 1
    assert not (run / CHECKPOINT_NAME).exists()
    assert re.fullmatch(
        r"fedlight: error: the run diverged at round 1 \(.*\) and stopped; no checkpoint.pt was "
        r"written before it \(checkpoint.every=1\): lower optim.lr, or set "
        r"fl.on_divergence=continue to keep training",
        the_error(err),
    )


def test_a_later_divergence_names_the_round_the_checkpoint_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    original = FederatedLoop.run_round

    def run_round(self: FederatedLoop, round_index: int):
        stats = original(self, round_index)
        if round_index == 3:
            next(iter(self.server.weights.values())).view(-1)[0] = math.nan
        return stats

    monkeypatch.setattr(FederatedLoop, "run_round", run_round)
    run = tmp_path / "run"
    args = [*TINY, "checkpoint.every=2", f"hydra.run.dir={run}"]
    code, err = run_exit(args, monkeypatch, capsys)
    assert code == 3
    assert "; checkpoint.pt keeps round 2, the last good one: lower optim.lr" in the_error(err)
    assert load_checkpoint(run / CHECKPOINT_NAME)["completed_rounds"] == 2


# A resume the privacy budget stops before any round ---------------------------------------------

BUDGET = [
    *TINY,
    "selection=poisson",
    "privacy=dp_fedavg",
    "privacy.noise_multiplier=null",
    "privacy.target_epsilon=3",
]


def test_a_resume_stopped_by_the_budget_before_any_round_can_be_resumed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd
) -> None:
    """Calibrated for 2 rounds, resumed elsewhere with 4: round 3 would exceed the budget, so no
    round runs; the new directory still gets the checkpoint, and resuming it stops again. The
    rounds run in `fl.workers=auto`'s worker processes, whose stderr only `capfd` sees."""
    first, second, third = (tmp_path / name for name in ("first", "second", "third"))
    assert run_exit([*BUDGET, "fl.rounds=2", f"hydra.run.dir={first}"], monkeypatch, capfd)[0] == 0
    for source, target in ((first, second), (second, third)):
        args = [*BUDGET, "fl.rounds=4", f"resume={source}", f"hydra.run.dir={target}"]
        code, err = run_exit(args, monkeypatch, capfd)
        assert code == 0, err
        assert "round 3 would spend epsilon=" in err
        summary = json.loads((target / "summary.json").read_text())
        assert summary["rounds"] == 2 and "round 3 would spend" in summary["stopped"]
        checkpoint = load_checkpoint(target / CHECKPOINT_NAME)
        assert checkpoint["completed_rounds"] == 2
        original = load_checkpoint(first / CHECKPOINT_NAME)
        for name, tensor in original["server_weights"].items():
            assert torch.equal(checkpoint["server_weights"][name], tensor)


# Sweeps go on past a failed job -----------------------------------------------------------------


def mnist_roots(tmp_path: Path) -> tuple[Path, Path]:
    """A tiny MNIST tree, and one whose training images are a FIFO."""
    good, bad = tmp_path / "good", tmp_path / "bad"
    write_mnist_tree(good, "MNIST")
    write_mnist_tree(bad, "MNIST")
    images = bad / "MNIST" / "raw" / "train-images-idx3-ubyte"
    images.unlink()
    os.mkfifo(images)
    return good, bad


TINY_MNIST = [
    "data=mnist",
    "model=mlp",
    "fl.num_clients=4",
    "fl.clients_per_round=2",
    "fl.rounds=1",
    "local.batch_size=8",
]


def test_a_job_whose_data_fails_is_said_and_the_sweep_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, deadline: None
) -> None:
    good, bad = mnist_roots(tmp_path)
    sweep = tmp_path / "sweep"
    args = ["-m", *TINY_MNIST, f"data.root={bad},{good}", f"hydra.sweep.dir={sweep}"]
    code, err = run_exit(args, monkeypatch, capsys)
    assert code == 2  # the failed job's code: its data
    said = [line for line in err.splitlines() if "error" in line]
    assert said[0] == (
        f"fedlight: {sweep / '0'}: error: data=mnist: {bad.resolve()}/MNIST/raw/"
        "train-images-idx3-ubyte is a FIFO, not a regular file; put the original file there"
    )
    assert said[1].startswith("fedlight: error: some jobs of the sweep failed")
    assert len(said) == 2 and "Traceback" not in err
    # the sweep's state as the failed job ends: error.txt counts it failed (no job finished: no ETA)
    assert (
        f"fedlight: sweep {sweep}: 1 of 2 done (1 failed, 0 diverged), 0 running, 1 left, ETA -\n"
        in err
    )
    assert not (sweep / "0" / "summary.json").exists()
    assert json.loads((sweep / "1" / "summary.json").read_text())["rounds"] == 1


@pytest.mark.slow
def test_with_joblib_the_valid_job_of_a_sweep_with_a_failing_job_runs(tmp_path: Path) -> None:
    """Through a real process (run_cli's timeout guards against a hang): joblib runs the jobs in
    worker processes, and the failed job's error crosses back to the sweep's exit code."""
    from tests.conftest import run_cli

    good, bad = mnist_roots(tmp_path)
    sweep = tmp_path / "sweep"
    args = ["-m", "hydra/launcher=joblib", *TINY_MNIST, f"data.root={bad},{good}"]
    result = run_cli(*args, f"hydra.sweep.dir={sweep}", cwd=tmp_path, check=False)
    assert result.returncode == 2, result.stderr
    assert f"fedlight: {sweep / '0'}: error: data=mnist: " in result.stderr
    assert json.loads((sweep / "1" / "summary.json").read_text())["rounds"] == 1


# fedlight report on a cut-short summary.json ----------------------------------------------------


def test_the_report_says_which_summary_is_cut_short_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    sweep = tmp_path / "sweep"
    args = ["-m", *TINY, "fl.rounds=1", "seed=0,1", f"hydra.sweep.dir={sweep}"]
    assert run_exit(args, monkeypatch, capsys)[0] == 0
    summary = sweep / "1" / "summary.json"
    summary.write_text(summary.read_text()[:40])  # a kill during the write
    with pytest.raises(json.JSONDecodeError) as broken:
        json.loads(summary.read_text())
    where = f"{broken.value.msg} at line {broken.value.lineno} column {broken.value.colno}"
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["fedlight", "report", str(sweep)])
    with pytest.raises(SystemExit) as exited:
        entry.main()  # the `fedlight` command
    captured = capsys.readouterr()
    assert exited.value.code == 0
    assert captured.err.splitlines() == [
        f"fedlight report: warning: {summary} is cut short or not JSON ({where}); its job is "
        "listed as incomplete: rerun it, or resume it from its checkpoint.pt"
    ]
    assert captured.out.splitlines()[-1] == "1 job in 1 group, 1 incomplete"


# Settings that overflow -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "setting", ["optim.lr=1e300", "fl.client_state_memory_mb=1e308", "optim.weight_decay=-1e39"]
)
def test_numbers_beyond_float32_are_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys, setting: str
) -> None:
    key, value = setting.split("=")
    code, err = cli_exit([*TINY, "algo=scaffold", setting], monkeypatch, capsys)
    assert code == 2
    assert_one_line(
        err,
        rf"^fedlight: error: {re.escape(key)}={re.escape(str(float(value)))} is beyond float32's "
        r"range "
        rf"\(±3\.4e\+38\), in which torch computes; give {re.escape(key)} a smaller value$",
    )


# Data files that are not files ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
@pytest.mark.parametrize("download", ["true", "false"])
def test_a_data_file_that_is_a_fifo_or_a_device_is_named_not_downloaded(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys,
    deadline: None,
    kind: str,
    download: str,
) -> None:
    root = tmp_path / "data"
    write_mnist_tree(root, "MNIST")
    labels = root / "MNIST" / "raw" / "train-labels-idx1-ubyte"
    labels.unlink()
    if kind == "fifo":
        os.mkfifo(labels)
        what = "a FIFO"
    else:
        labels.symlink_to("/dev/zero")
        what = "a link to /dev/zero, a character device"
    run = tmp_path / "run"
    args = [*TINY_MNIST, f"data.root={root}", f"data.download={download}", f"hydra.run.dir={run}"]
    code, err = run_exit(args, monkeypatch, capsys)
    assert code == 2
    assert the_error(err) == (
        f"fedlight: error: data=mnist: {labels} is {what}, not a regular file; put the original "
        "file there"
    )
    assert "download" not in err


# Hydra's own overrides ---------------------------------------------------------------------------


def test_a_run_directory_hydra_cannot_parse_is_one_line_and_quoting_it_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    target = tmp_path / "my run (1)"
    code, err = cli_exit([*TINY, f"hydra.run.dir={target}"], monkeypatch, capsys)
    assert code == 2
    assert_one_line(
        err,
        rf"^fedlight: error: hydra.run.dir={re.escape(str(target))}: Hydra cannot parse it "
        rf"\(mismatched input ' \(' .*\); quote the value: "
        rf"hydra.run.dir='{re.escape(str(target))}' \(in a shell, quote it all again\)$",
    )
    assert not target.exists()
    args = [*TINY, "fl.rounds=1", f"hydra.run.dir='{target}'"]
    assert run_exit(args, monkeypatch, capsys)[0] == 0
    assert json.loads((target / "summary.json").read_text())["rounds"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my run (1)"]  # locked there, too


# User modules that break assumptions -----------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "message"),
    [
        (
            "NoParameters",
            r"model._target_=tests.helpers.fault_modules.NoParameters has no parameters: federated "
            r"training trains and averages them; give the model at least one trainable layer",
        ),
        (
            "SkipsBatches",
            r"the model's training_step returned None, not the loss; fedlight trains on every "
            r"batch \(Lightning would skip it\): return the loss tensor, or a dict with it under "
            r"'loss'",
        ),
    ],
)
def test_a_module_fedlight_cannot_train_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, module: str, message: str
) -> None:
    args = [
        *TINY,
        f"model._target_=tests.helpers.fault_modules.{module}",
        f"hydra.run.dir={tmp_path}",
    ]
    code, err = run_exit(args, monkeypatch, capsys)
    assert code == 2
    assert re.fullmatch(f"fedlight: error: {message}", the_error(err))


# Many clients ----------------------------------------------------------------------------------


def test_participation_beyond_a_thousand_clients_is_drawn_as_block_means(tmp_path: Path) -> None:
    """100,000 clients: 1,000 bars of 100 clients each, in seconds (one bar per client took
    minutes)."""
    counts = [client % 3 for client in range(100_000)]
    edges, means = client_blocks(counts)
    assert len(means) == MAX_CLIENT_BARS and list(edges[:3]) == [0, 100, 200]
    assert means[0] == pytest.approx(sum(counts[:100]) / 100)
    assert means[-1] == pytest.approx(sum(counts[-100:]) / 100)
    edges, means = client_blocks([2, 0, 1])  # few clients: one bar each
    assert list(edges) == [0, 1, 2, 3] and list(means) == [2, 0, 1]
    edges, means = client_blocks(list(range(2_500)))  # blocks of 3, the last one of 1
    assert len(means) == 834 and edges[-2:].tolist() == [2_499, 2_500] and means[-1] == 2_499
    write_participation(tmp_path, counts)
    assert (tmp_path / "participation.png").stat().st_size > 0
    assert len(json.loads((tmp_path / "participation.json").read_text())["counts"]) == 100_000


# Threads ---------------------------------------------------------------------------------------


def test_more_threads_than_cpus_warn_and_absurd_counts_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    cpus = len(os.sched_getaffinity(0))
    threads = cpus + 1
    args = [*TINY, "fl.rounds=1", f"fl.threads_per_worker={threads}", f"hydra.run.dir={tmp_path}"]
    code, err = run_exit(args, monkeypatch, capsys)
    assert code == 0
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert warnings == [
        f"fedlight: warning: fl.threads_per_worker={threads} × fl.workers=1 = {threads} torch "
        f"threads on the {cpus} CPUs this process may use: they share them, slower; lower "
        "fl.threads_per_worker unless you reproduce numbers computed with that many threads"
    ]
    code, err = cli_exit([*TINY, f"fl.threads_per_worker={MAX_THREADS + 1}"], monkeypatch, capsys)
    assert code == 2
    assert_one_line(
        err,
        rf"^fedlight: error: fl.threads_per_worker={MAX_THREADS + 1} must be <= 1024 \(torch "
        r"crashes at 10\^6 threads\); more than the CPUs only slows a run down$",
    )


def test_far_more_clients_than_examples_are_refused_before_setup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, deadline: None
) -> None:
    """10^7 clients on 1,438 digits sat in setup for minutes without a word; now refused at
    once. Up to 100 clients per example run, a large federation saying what it sets up."""
    args = [*TINY, f"fl.num_clients={10**7}", f"hydra.run.dir={tmp_path / 'huge'}"]
    code, err = run_exit(args, monkeypatch, capsys)
    assert code == 2
    assert the_error(err) == (
        "fedlight: error: fl.num_clients=10000000 but data=digits has 1438 training examples: "
        "more than 99% of the clients could never hold data or train; give fl.num_clients <= "
        "143800 (at most 1438, so that every client can hold an example)"
    )
    monkeypatch.setattr("fedlight.runs.federation.LARGE_FEDERATION", 10)
    args = [*TINY, "fl.rounds=1", f"hydra.run.dir={tmp_path / 'said'}"]
    code, err = run_exit(args, monkeypatch, capsys)
    assert code == 0
    assert err.splitlines()[0] == (
        "fedlight: setting up 10 clients (partition, index sets, label histogram; time and memory "
        "grow with fl.num_clients)"
    )
