"""Client state stores: the disk store round-trips exactly, keeps only the versions a resume can
need, resumes bit-exactly into a self-contained run directory, and changes no number; the auto
store puts each state where its size says and reads every store's checkpoints."""

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from fedlight.core.errors import ConfigError
from fedlight.core.tensors import StateDict
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from fedlight.store.checkpoint import load_checkpoint
from fedlight.store.client_states import (
    CLIENT_STATES_DIR,
    AutoClientStates,
    DiskClientStates,
    MemoryClientStates,
)
from tests.conftest import TINY, rows_without_timings, run_killed_in_round
from tests.helpers.commands import validate_command_line

CPU = torch.device("cpu")
SCAFFOLD = [*TINY, "algo=scaffold", "partition=dirichlet", "optim.momentum=0.9"]


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    """The CPU cores are shared: one intra-op thread avoids oversubscription."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def sample_state(seed: int) -> StateDict:
    generator = torch.Generator().manual_seed(seed)
    return {
        "conv.weight": torch.randn(4, 3, 5, 5, generator=generator),
        "fc.bias": torch.randn(7, generator=generator, dtype=torch.float64),
        "half": torch.randn(3, generator=generator).to(torch.bfloat16),
        "bn.num_batches_tracked": torch.tensor(seed, dtype=torch.int64),
    }


def assert_same_state(actual: StateDict, expected: StateDict) -> None:
    assert actual.keys() == expected.keys()
    for name, tensor in expected.items():
        assert actual[name].dtype == tensor.dtype and actual[name].device == tensor.device
        assert torch.equal(actual[name], tensor), name


def files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def snapshot(directory: Path) -> dict[str, str]:
    """Every file under `directory` with a hash of its bytes."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def checkpoint_of(run_dir: Path) -> dict[str, Any]:
    return load_checkpoint(run_dir / "checkpoint.pt")


def test_disk_store_round_trips_states_exactly(tmp_path: Path) -> None:
    store = DiskClientStates(tmp_path / CLIENT_STATES_DIR, CPU)
    assert len(store) == 0 and store.get(3) is None
    store.put(3, 1, sample_state(1))
    store.put(8, 1, sample_state(2))
    assert_same_state(store[3], sample_state(1))
    store.put(3, 2, sample_state(3))
    assert_same_state(store[3], sample_state(3))
    assert_same_state(store[8], sample_state(2))
    assert sorted(store) == [3, 8] and len(store) == 2
    assert 3 in store and 5 not in store and store.get(5) is None
    # the index: each newest version's round, size and SHA-256; no tensors
    assert store.state_dict() == {
        str(client): [
            round_index,
            path.stat().st_size,
            hashlib.sha256(path.read_bytes()).hexdigest(),
        ]
        for client, round_index in ((3, 2), (8, 1))
        for path in [tmp_path / CLIENT_STATES_DIR / str(client) / f"{round_index}.pt"]
    }
    assert files(tmp_path / CLIENT_STATES_DIR) == ["3/2.pt", "8/1.pt"]  # no partial files left


def test_exactly_the_versions_a_resume_can_need_are_kept(tmp_path: Path) -> None:
    """Each client keeps its newest version and the one the last saved checkpoint names."""
    directory = tmp_path / CLIENT_STATES_DIR
    store = DiskClientStates(directory, CPU)
    store.put(0, 1, sample_state(1))
    store.put(1, 1, sample_state(2))
    store.put(1, 2, sample_state(3))  # before any checkpoint: round 1's version is not needed
    assert files(directory) == ["0/1.pt", "1/2.pt"]
    store.checkpoint_saved()  # the checkpoint names 0/1 and 1/2
    store.put(0, 3, sample_state(4))
    store.put(0, 4, sample_state(5))  # 0/3 was never in a checkpoint
    store.put(2, 4, sample_state(6))
    assert files(directory) == ["0/1.pt", "0/4.pt", "1/2.pt", "2/4.pt"]
    store.checkpoint_saved()  # names 0/4, 1/2, 2/4: 0/1 is superseded
    assert files(directory) == ["0/4.pt", "1/2.pt", "2/4.pt"]
    assert_same_state(store[0], sample_state(5))


def test_loading_an_index_links_the_named_versions_and_leaves_the_old_run_alone(
    tmp_path: Path,
) -> None:
    old_run, new_run = tmp_path / "old", tmp_path / "new"
    old = DiskClientStates(old_run / CLIENT_STATES_DIR, CPU)
    old.put(0, 1, sample_state(1))
    old.put(5, 1, sample_state(2))
    index = old.state_dict()
    old.checkpoint_saved()
    old.put(0, 2, sample_state(3))  # written after the checkpoint: not part of the resume
    before = snapshot(old_run)

    new = DiskClientStates(new_run / CLIENT_STATES_DIR, CPU)
    new.load_state_dict(index, old_run)
    assert files(new_run / CLIENT_STATES_DIR) == ["0/1.pt", "5/1.pt"]
    assert (new_run / CLIENT_STATES_DIR / "0/1.pt").samefile(old_run / CLIENT_STATES_DIR / "0/1.pt")
    assert_same_state(new[0], sample_state(1))
    assert_same_state(new[5], sample_state(2))
    new.put(0, 2, sample_state(4))  # the link goes at the new run's first checkpoint
    assert files(new_run / CLIENT_STATES_DIR) == ["0/1.pt", "0/2.pt", "5/1.pt"]
    new.checkpoint_saved()
    assert files(new_run / CLIENT_STATES_DIR) == ["0/2.pt", "5/1.pt"]
    assert snapshot(old_run) == before


def test_a_resume_whose_state_files_are_missing_says_so_in_one_line(tmp_path: Path) -> None:
    store = DiskClientStates(tmp_path / "new" / CLIENT_STATES_DIR, CPU)
    with pytest.raises(ConfigError, match=r"^resume=.*3/7\.pt is missing; resume from a complete"):
        store.load_state_dict({"3": 7}, tmp_path / "old")


@pytest.mark.parametrize(
    "overrides",
    [SCAFFOLD, [*TINY, "algo=local"], [*TINY, "algo=central"]],
    ids=["scaffold", "local", "central"],
)
def test_the_disk_and_auto_stores_give_the_memory_stores_numbers(
    make_job: Callable[[list[str]], Job], tmp_path: Path, overrides: list[str]
) -> None:
    """The tiny model's states fit auto's default budget (RAM); with a budget of 0 they go to
    disk."""
    run_job(make_job([*overrides, "fl.client_state=memory"]), tmp_path / "memory")
    run_job(make_job([*overrides, "fl.client_state=disk"]), tmp_path / "disk")
    run_job(make_job(overrides), tmp_path / "auto")
    run_job(make_job([*overrides, "fl.client_state_memory_mb=0"]), tmp_path / "auto_disk")
    rows = rows_without_timings(tmp_path / "memory")
    assert len(rows) == 4
    for store in ("disk", "auto", "auto_disk"):
        assert rows_without_timings(tmp_path / store) == rows, store
    assert not (tmp_path / "memory" / CLIENT_STATES_DIR).exists()
    assert not (tmp_path / "auto" / CLIENT_STATES_DIR).exists()
    assert checkpoint_of(tmp_path / "auto")["client_states"].keys() == (
        checkpoint_of(tmp_path / "auto_disk")["client_states"].keys()
    )
    assert all(  # [round, size, sha256] of a version file
        isinstance(e, list) and isinstance(e[0], int)
        for e in checkpoint_of(tmp_path / "auto_disk")["client_states"].values()
    )

    in_memory = checkpoint_of(tmp_path / "memory")["client_states"]
    on_disk = DiskClientStates(tmp_path / "reread", CPU)
    on_disk.load_state_dict(checkpoint_of(tmp_path / "disk")["client_states"], tmp_path / "disk")
    assert sorted(on_disk) == sorted(int(c) for c in in_memory)
    for client, state in in_memory.items():
        assert_same_state(on_disk[int(client)], state)


def tensor_paths(value: Any, path: str = "") -> list[str]:
    """Where a nested checkpoint holds tensors."""
    if isinstance(value, torch.Tensor):
        return [path]
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in tensor_paths(item, f"{path}/{key}")]
    if isinstance(value, list | tuple):
        return [p for i, item in enumerate(value) for p in tensor_paths(item, f"{path}/{i}")]
    return []


def test_the_checkpoint_of_the_disk_store_holds_no_client_tensors(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    run_job(make_job([*SCAFFOLD, "fl.client_state=disk"]), tmp_path)
    checkpoint = checkpoint_of(tmp_path)
    index = checkpoint["client_states"]
    assert index and all(isinstance(e[0], int) and 1 <= e[0] <= 4 for e in index.values())
    outside_the_server = [
        p
        for p in tensor_paths(checkpoint)
        if not p.startswith(("/server_weights/", "/server_extras/", "/torch_rng"))
    ]
    assert outside_the_server == []
    # One file per client with state: the final checkpoint names every newest version.
    expected = sorted(f"{client}/{entry[0]}.pt" for client, entry in index.items())
    assert files(tmp_path / CLIENT_STATES_DIR) == expected


@pytest.mark.parametrize(
    "store",
    [["fl.client_state=disk"], ["fl.client_state=auto", "fl.client_state_memory_mb=0"]],
    ids=["disk", "auto_on_disk"],
)
def test_killed_and_resumed_with_the_disk_store_is_bit_exact_and_self_contained(
    make_job: Callable[[list[str]], Job],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    store: list[str],
) -> None:
    """Killed in round 4 after round 2's checkpoint: round 3 wrote new versions beside the ones
    the checkpoint names; the resume takes the named ones into its own run directory."""
    overrides = [*SCAFFOLD, *store, "fl.rounds=5", "checkpoint.every=2"]
    run_job(make_job(overrides), tmp_path / "full")
    killed_dir = tmp_path / "killed"
    run_killed_in_round(make_job(overrides), killed_dir, 4, monkeypatch)
    killed_index = checkpoint_of(killed_dir)["client_states"]
    assert checkpoint_of(killed_dir)["completed_rounds"] == 2
    killed_files = set(files(killed_dir / CLIENT_STATES_DIR))
    named = {f"{client}/{entry[0]}.pt" for client, entry in killed_index.items()}
    assert named < killed_files  # round 3's versions exist too, and never replaced these
    assert all(name.endswith("/3.pt") for name in killed_files - named)
    before = snapshot(killed_dir)

    resumed_dir = tmp_path / "resumed"
    run_job(make_job([*overrides, f"resume={killed_dir}"]), resumed_dir)
    assert rows_without_timings(resumed_dir) == rows_without_timings(tmp_path / "full")
    assert snapshot(killed_dir) == before

    full, resumed = checkpoint_of(tmp_path / "full"), checkpoint_of(resumed_dir)
    assert resumed["client_states"] == full["client_states"]
    for key in ("server_weights", "server_extras"):
        assert all(torch.equal(full[key][k], resumed[key][k]) for k in full[key])
    names = sorted(f"{client}/{entry[0]}.pt" for client, entry in full["client_states"].items())
    assert (
        files(tmp_path / "full" / CLIENT_STATES_DIR)
        == files(resumed_dir / CLIENT_STATES_DIR)
        == names
    )
    reread_full = DiskClientStates(tmp_path / "a", CPU)
    reread_full.load_state_dict(full["client_states"], tmp_path / "full")
    reread_resumed = DiskClientStates(tmp_path / "b", CPU)
    reread_resumed.load_state_dict(resumed["client_states"], resumed_dir)
    for client in reread_full:
        assert_same_state(reread_resumed[client], reread_full[client])


def test_an_unknown_client_state_store_fails_with_one_line() -> None:
    with pytest.raises(ConfigError) as error:
        validate_command_line(["fl.client_state=ssd"])
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("fl.client_state=ssd is not a store; use auto"), message
    with pytest.raises(ConfigError, match=r"^fl.client_state_memory_mb=-1.0 must be >= 0"):
        validate_command_line(["fl.client_state_memory_mb=-1"])


def auto_store(directory: Path, num_clients: int, memory_bytes: int) -> AutoClientStates:
    disk = DiskClientStates(directory, CPU)
    return AutoClientStates(MemoryClientStates(CPU), disk, num_clients, memory_bytes)


def test_the_auto_store_keeps_a_state_in_ram_when_every_clients_would_fit(tmp_path: Path) -> None:
    """sample_state is 1,270 bytes: 10 clients' fit in 16,000 bytes, 20 clients' do not."""
    small, large = sample_state(0), {"w": torch.zeros(1000)}  # 1,270 and 4,000 bytes
    store = auto_store(tmp_path / "a", 10, 16_000)
    store.put(0, 1, small)
    store.put(1, 1, large)
    assert list(store.memory) == [0] and list(store.disk) == [1]
    assert files(tmp_path / "a") == ["1/1.pt"]
    assert sorted(store) == [0, 1] and 1 in store and 2 not in store
    assert_same_state(store[0], small)
    assert_same_state(store[1], large)

    saved = store.state_dict()
    assert saved.keys() == {"0", "1"} and saved["1"][0] == 1
    store.checkpoint_saved()
    store.put(1, 2, small)  # now small enough for RAM: the file stays while the checkpoint names it
    assert list(store.memory) == [0, 1] and list(store.disk) == []
    assert files(tmp_path / "a") == ["1/1.pt"]
    store.checkpoint_saved()
    assert files(tmp_path / "a") == []

    resumed = auto_store(tmp_path / "b", 10, 16_000)
    run_dir = tmp_path / "run"
    (run_dir / CLIENT_STATES_DIR / "1").mkdir(parents=True)
    torch.save(large, run_dir / CLIENT_STATES_DIR / "1" / "1.pt")
    resumed.load_state_dict({"0": small, "1": 1}, run_dir)
    assert list(resumed.memory) == [0] and list(resumed.disk) == [1]
    assert_same_state(resumed[1], large)
    assert auto_store(tmp_path / "c", 20, 16_000).write(0, 1, small).round_index == 1  # on disk


def test_a_run_resumed_into_its_own_directory_keeps_what_its_checkpoint_names(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed in round 4, resumed in place and killed in round 4 again: round 3 ran twice, and
    the versions of round 2's checkpoint, still the directory's, survived it both times."""
    overrides = [*SCAFFOLD, "fl.client_state=disk", "fl.rounds=5", "checkpoint.every=2"]
    run_job(make_job(overrides), tmp_path / "full")
    run_dir = tmp_path / "in_place"
    run_killed_in_round(make_job(overrides), run_dir, 4, monkeypatch)
    run_killed_in_round(make_job([*overrides, f"resume={run_dir}"]), run_dir, 4, monkeypatch)
    assert checkpoint_of(run_dir)["completed_rounds"] == 2
    run_job(make_job([*overrides, f"resume={run_dir}"]), run_dir)
    assert rows_without_timings(run_dir) == rows_without_timings(tmp_path / "full")
