"""Several workers (`fl.workers`): the numbers do not depend on how many there are (metrics.csv of
2 workers equals that of 1 for each kind of algorithm and stage, SCAFFOLD's disk store and a
killed and resumed run included), bad settings and failing workers stop the run with one line,
and the CLI spawns them itself. Worker processes use one torch thread each, like the 1-worker
runs here."""

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from torch import Tensor

from fedlight.core.errors import ConfigError
from fedlight.core.settings import FLSettings, RunSettings
from fedlight.drivers import workers
from fedlight.drivers.workers import (
    OneWorker,
    WorkerError,
    assign,
    byte_views,
    describe,
    exchange_bytes,
    rebuild,
    received,
)
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from fedlight.runs.launch import spawn_workers
from fedlight.store.checkpoint import load_checkpoint
from fedlight.store.client_states import CLIENT_STATES_DIR, DiskClientStates
from tests.conftest import TINY, rows_without_timings, run_cli
from tests.helpers import worker_targets

CPU = torch.device("cpu")
# Clients of unequal sizes, 6 per round: shared as (1, 3, 5), (0, 2, 4) and (1, 2, 5), (0, 3, 4).
BASE = [*TINY, "fl.rounds=2", "partition=dirichlet", "fl.clients_per_round=6"]
VARIANTS = {
    "fedavg": [],
    "scaffold": ["algo=scaffold", "optim.momentum=0.9"],
    "fedprox": ["algo=fedprox"],
    "fednova": ["algo=fednova", "optim.momentum=0.9"],
    "fedadam": ["algo=fedadam"],  # the other server optimizers' state is handled alike
    "local": ["algo=local"],
    "central": ["algo=central"],
    # every selector draws and updates its state alike on every worker
    "weighted": ["selection=weighted"],
    "power_of_choice": ["selection=power_of_choice", "selection.candidates=8"],
    "poisson": ["selection=poisson"],
    # most of 5,000 clients hold none of the digits: rounds of few or no participants
    "clients_without_data": ["partition=iid", "fl.num_clients=5000"],
    # a compressor's residuals in the disk store, written by whichever worker trained the client,
    # and a quantized broadcast
    "topk_disk": [
        "algo=scaffold",
        "upload=[topk]",
        "upload.topk.ratio=0.05",
        "fl.client_state=disk",
        "download=[int8]",
    ],
    # attacks: after the gather (the same forgery on every worker), on the data, on the upload
    "alie_median": ["attack=alie", "aggregator=median"],
    "label_flip_krum": ["attack=label_flip", "aggregator=krum"],
    # privacy: the server's noise and adaptive clip drawn alike on every worker; DP-SGD's per
    # client, by whichever worker trains it
    "adaptive_clip": ["selection=poisson", "privacy=adaptive_clip", "privacy.count_noise=2"],
    "dp_sgd": ["privacy=dp_sgd"],
    # local test sets, each client's own model read from the disk store as it is evaluated
    "fedper_disk": ["algo=fedper", "fl.client_state=disk", "partition.client_test_fraction=0.3"],
    # a second, personal training per participant, its state on the disk store
    "ditto_disk": ["algo=ditto", "fl.client_state=disk", "partition.client_test_fraction=0.3"],
    # the system's clock: dropouts drawn alike, stragglers' updates lost whoever trained them
    "tiers_deadline": ["system=tiers", "system.deadline=1", "system.dropout=0.2"],
    "not_finite_rejected": [
        "attack=label_flip",
        "attack._target_=tests.helpers.user_attack.NotFiniteUpdates",
        "attack.count=3",
        "aggregator=geometric_median",
    ],
}
# Settings of the process group the comparison runs share (as torchrun would start it).
GROUP = RunSettings(fl=FLSettings(workers=2, threads_per_worker=1), device="cpu")


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    """As in every worker: the numbers of 1 and 2 workers are compared at equal threads."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


# The variants run in this many tests (one process group each), so that a parallel test run
# (`pytest -n`) spreads them.
SHARES = 3


@pytest.mark.parametrize("share", range(SHARES))
def test_every_algorithm_and_selector_gives_the_same_numbers_on_two_workers_as_on_one(
    make_job: Callable[[list[str]], Job], tmp_path: Path, share: int
) -> None:
    """One process group of 2 runs a share of the algorithms, selectors and stages."""
    names = list(VARIANTS)[share::SHARES]
    runs = [
        (make_job([*BASE, *VARIANTS[name], "fl.workers=2"]), tmp_path / f"{name}-2", None)
        for name in names
    ]
    spawn_workers(GROUP, worker_targets.run_jobs, (runs,), (ConfigError,))
    for name in names:
        run_job(make_job([*BASE, *VARIANTS[name]]), tmp_path / f"{name}-1")
        one, two = (rows_without_timings(tmp_path / f"{name}-{n}") for n in (1, 2))
        assert len(one) == 2 and two == one, name


def test_scaffold_on_disk_keeps_its_versions_and_resumes_on_two_workers_as_on_one(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """SCAFFOLD's control variates on the disk store, whichever worker wrote them: the same file
    versions as one worker, and a run killed and resumed on 2 workers ends as 1 worker's."""
    disk = [*BASE, "algo=scaffold", "optim.momentum=0.9", "fl.client_state=disk"]
    runs = [
        (make_job([*disk, "fl.workers=2"]), tmp_path / "disk-2", None),
        (make_job([*disk, "fl.workers=2"]), tmp_path / "killed-2", 2),
        (
            make_job([*disk, "fl.workers=2", f"resume={tmp_path / 'killed-2'}"]),
            tmp_path / "resumed-2",
            None,
        ),
    ]
    spawn_workers(GROUP, worker_targets.run_jobs, (runs,), (ConfigError,))
    run_job(make_job(disk), tmp_path / "disk-1")
    assert rows_without_timings(tmp_path / "disk-2") == rows_without_timings(tmp_path / "disk-1")

    states_1, states_2 = (tmp_path / f"disk-{n}" / CLIENT_STATES_DIR for n in (1, 2))
    assert files(states_2) == files(states_1)
    index = load_checkpoint(tmp_path / "disk-2" / "checkpoint.pt")["client_states"]
    assert files(states_2) == sorted(f"{client}/{entry[0]}.pt" for client, entry in index.items())

    assert len(rows_without_timings(tmp_path / "killed-2")) == 1  # killed as round 2 started
    assert rows_without_timings(tmp_path / "resumed-2") == rows_without_timings(tmp_path / "disk-1")
    full = load_checkpoint(tmp_path / "disk-1" / "checkpoint.pt")
    resumed = load_checkpoint(tmp_path / "resumed-2" / "checkpoint.pt")
    for part in ("server_weights", "server_extras"):
        assert all(torch.equal(full[part][k], resumed[part][k]) for k in full[part]), part


def test_the_cli_spawns_the_workers_itself(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    two = ["fl.workers=2", "fl.threads_per_worker=1", f"hydra.run.dir={tmp_path / 'two'}"]
    run_cli(*BASE, *two, cwd=tmp_path)
    run_job(make_job(BASE), tmp_path / "one")
    assert rows_without_timings(tmp_path / "two") == rows_without_timings(tmp_path / "one")
    # summary.json's environment: the workers and each one's threads, the rest as one worker's
    environments = [
        json.loads((tmp_path / run / "summary.json").read_text())["environment"]
        for run in ("two", "one")
    ]
    assert [(e.pop("workers"), e.pop("torch_threads")) for e in environments] == [(2, 1), (1, 1)]
    assert environments[0] == environments[1]
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] in (["two", "one"], ["one", "two"])


def test_under_torchrun_the_ranks_join_its_group_and_give_the_same_numbers(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """The README's one-machine torchrun command: 2 ranks, gloo, no spawning of our own."""
    scaffold = [*BASE, *VARIANTS["scaffold"]]
    torchrun = ("-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2")
    result = run_cli(
        *scaffold, f"hydra.run.dir={tmp_path / 'torchrun'}", cwd=tmp_path, launcher=torchrun
    )
    # Rank 0 alone logs; two separate 1-worker runs would each print their rounds.
    assert (result.stdout + result.stderr).count("round 2:") == 1
    run_job(make_job(scaffold), tmp_path / "one")
    assert rows_without_timings(tmp_path / "torchrun") == rows_without_timings(tmp_path / "one")
    assert (tmp_path / "torchrun" / "summary.json").is_file()


@pytest.mark.parametrize(
    ("error", "expected", "message"),
    [
        (RuntimeError("boom\nsecond line"), WorkerError, r"^worker 1 failed: RuntimeError: boom "),
        (ConfigError("data.root=x: no files"), ConfigError, r"^data.root=x: no files$"),
    ],
    ids=["crash", "config_error"],
)
def test_a_failing_worker_stops_every_worker_with_one_line(
    error: Exception, expected: type[Exception], message: str
) -> None:
    """Rank 0 waits in a collective for rank 1, which fails: the run ends instead of hanging."""
    with pytest.raises(expected, match=message) as raised:
        spawn_workers(GROUP, worker_targets.fail_on_rank_one, (error,), (ConfigError,))
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["fl.workers=0"], r"^fl.workers=0 must be >= 1"),
        (["fl.workers=5", "fl.clients_per_round=4"], r"^fl.workers=5 exceeds fl.clients_per_round"),
        (["fl.threads_per_worker=0"], r"^fl.threads_per_worker=0 must be >= 1"),
        (["fl.backend=mpi"], r"^fl.backend=mpi is not a backend; use auto"),
        (["fl.backend=nccl", "device=cpu"], r"^fl.backend=nccl needs CUDA and device=cpu"),
        (["fl.workers=2", "device=cuda:1"], r"^device=cuda:1 names one GPU but fl.workers=2"),
    ],
)
def test_bad_worker_settings_are_refused_in_one_line(
    make_job: Callable[[list[str]], Job], overrides: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        make_job([*TINY, *overrides])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_nccl_without_a_gpu_is_refused_before_any_worker_starts(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    job = make_job([*TINY, "fl.workers=2", "fl.backend=nccl", "device=auto"])
    with pytest.raises(ConfigError, match=r"^fl.backend=nccl needs CUDA and this run's device is"):
        run_job(job, tmp_path / "run")


def test_under_torchrun_fl_workers_must_match_the_world_size(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {
        "RANK": "0",
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "x",
        "MASTER_PORT": "1",
    }.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=r"^fl.workers=3 but this process group has 2 processes"):
        run_job(make_job([*TINY, "fl.workers=3"]), tmp_path / "run")


def test_participants_are_shared_largest_first_to_the_least_loaded_worker() -> None:
    assert assign([5, 5, 5, 5, 5], 2) == ((0, 2, 4), (1, 3))  # equal sizes: round-robin
    assert assign([1, 9, 3, 4], 2) == ((1,), (0, 2, 3))
    assert assign([7], 2) == ((0,), ())  # one participant (central): one worker idles
    share = OneWorker(CPU).share([3, 1, 2])
    assert share.mine("abc") == ["a", "b", "c"]
    assert OneWorker(CPU).gather(share, ["x", "y", "z"]) == ["x", "y", "z"]


def test_gathered_items_arrive_bit_identical_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The other worker's tensors cross in 7-byte chunks (pieces of several tensors in one chunk,
    one tensor over several) and come back bit-identical, each with storage of its own."""
    monkeypatch.setattr(workers, "GATHER_CHUNK_BYTES", 7)
    generator = torch.Generator().manual_seed(0)
    state = {
        "w": torch.randn(3, 4, generator=generator),
        "half": torch.randn(5, generator=generator).to(torch.bfloat16),
        "double": torch.randn(2, generator=generator, dtype=torch.float64),
        "count": torch.tensor(7),
        "mask": torch.tensor([True, False, True]),
        "empty": torch.zeros(0, 3),
        "strided": torch.arange(12.0).reshape(3, 4).t(),
    }
    mine_packed, mine_tensors = describe([{"w": torch.ones(2)}])
    packed, tensors = describe([("client", 3, state), None, {"loss": 0.25}])
    longest = max(mine_packed.nbytes, packed.nbytes)
    sent = torch.zeros(longest, dtype=torch.uint8)
    sent[: packed.nbytes] = torch.cat(byte_views(tensors))
    chunks: list[Tensor] = []

    def all_gather(incoming: list[Tensor], outgoing: Tensor) -> None:  # worker 1's bytes arrive
        start = 7 * len(chunks)
        chunks.append(outgoing.clone())
        incoming[0].copy_(outgoing)
        incoming[1].copy_(sent[start : start + outgoing.numel()])

    theirs = [None, received(packed, CPU)]
    exchange_bytes(mine_tensors, theirs, longest, all_gather, CPU)
    assert len(chunks) == -(-longest // 7)
    assert torch.equal(torch.cat(chunks)[:8], torch.ones(2).view(torch.uint8))
    (label, client, back), nothing, loss = rebuild(packed, theirs[1], CPU)
    assert (label, client, nothing, loss) == ("client", 3, None, {"loss": 0.25})
    for name, tensor in state.items():
        assert back[name].dtype == tensor.dtype and torch.equal(back[name], tensor), name
        assert back[name].numel() == 0 or back[name].untyped_storage().nbytes() == tensor.nbytes


def test_only_the_file_owning_worker_removes_disk_versions(tmp_path: Path) -> None:
    """Worker 1 writes a client's versions; worker 0 (owner) alone removes replaced ones."""
    directory = tmp_path / CLIENT_STATES_DIR
    owner = DiskClientStates(directory, CPU, owns_files=True)
    other = DiskClientStates(directory, CPU, owns_files=False)
    state = {"c": torch.ones(2)}
    for round_index in (1, 2):
        written = other.write(4, round_index, state)
        for store in (owner, other):
            store.commit(4, round_index, written)
    assert files(directory) == ["4/2.pt"]  # round 1's version was in no checkpoint
    for store in (other, owner):
        store.checkpoint_saved()
    written = other.write(4, 3, state)
    for store in (owner, other):
        store.commit(4, 3, written)
    other.checkpoint_saved()
    assert files(directory) == ["4/2.pt", "4/3.pt"]  # only the owner's checkpoint removes 2
    owner.checkpoint_saved()
    assert files(directory) == ["4/3.pt"]
    assert torch.equal(other[4]["c"], state["c"])
