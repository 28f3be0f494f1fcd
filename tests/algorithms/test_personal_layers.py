"""FedPer and LG-FedAvg (issue 16, part 2): personal layers never leave the client, only shared
entries travel and are counted, each client's model is the shared layers with its own, and runs
resume bit-exactly."""

import csv
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from fedlight.core.errors import ConfigError
from fedlight.core.tensors import nbytes
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from tests.conftest import TINY, rows_without_timings, run_killed_in_round

PERSONAL = [*TINY, "partition=label_quantity", "partition.client_test_fraction=0.3"]
HEAD = {"net.5.weight", "net.5.bias"}  # the mlp's classifier head


def read_rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize(("algo", "personal"), [("fedper", HEAD), ("lg_fedavg", None)])
def test_personal_layers_stay_on_the_client_and_only_shared_bytes_travel(
    make_job: Callable[[list[str]], Job], tmp_path: Path, algo: str, personal: set[str] | None
) -> None:
    """The checkpoint's client states hold exactly the personal entries, the server's personal
    entries are still the initial ones, and bytes per round are the shared entries' size."""
    job = make_job([*PERSONAL, f"algo={algo}"])
    run_job(job, tmp_path)
    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    server = checkpoint["server_weights"]
    expected = personal if personal is not None else set(server) - HEAD
    states = [s for s in checkpoint["client_states"].values() if s]
    assert states and all(set(state) == expected for state in states)
    shared = {k: t for k, t in server.items() if k not in expected}
    for row in read_rows(tmp_path):
        participants = int(float(row["participants"]))
        assert int(row["bytes_down"]) == participants * nbytes(shared)
        assert int(row["bytes_up"]) == participants * nbytes(shared)
    trained = next(iter(checkpoint["client_states"].values()))
    assert any(not torch.equal(trained[k], server[k]) for k in expected)


def test_fedper_with_a_layer_the_model_lacks_is_refused_in_one_line(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=r"^algo.personal_layers names net.9, which the model"):
        run_job(make_job([*TINY, "algo=fedper", "algo.personal_layers=[net.9]"]), tmp_path)


def test_a_killed_fedper_run_resumes_bit_exactly_from_the_disk_store(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    overrides = [*PERSONAL, "algo=fedper", "fl.client_state=disk"]
    run_job(make_job(overrides), tmp_path / "full")
    run_killed_in_round(make_job(overrides), tmp_path / "killed", 3, monkeypatch)
    run_job(make_job([*overrides, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    assert rows_without_timings(tmp_path / "resumed") == rows_without_timings(tmp_path / "full")
