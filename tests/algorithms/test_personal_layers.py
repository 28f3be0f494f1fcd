"""FedPer and LG-FedAvg (issue 16, part 2): personal layers never leave the client, only shared
entries travel and are counted, each client's model is the shared layers with its own, and runs
resume bit-exactly. FedPer with `algo.train_shared=false` (issue 67 item 3): only the personal
layers train."""

import copy
import csv
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch.nn.functional import cross_entropy

from fedlight.core.errors import ConfigError
from fedlight.core.rng import Stream, derive_seed
from fedlight.core.tensors import nbytes
from fedlight.data.digits import Digits
from fedlight.drivers.base import Clients
from fedlight.drivers.synchronous import FederatedLoop
from fedlight.runs.experiment import build_module, run_job
from fedlight.runs.job import Job
from tests.conftest import TINY, rows_without_timings, run_killed_in_round
from tests.helpers.drivers import train_client

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


def one_full_batch_step(make_job: Callable[[list[str]], Job], overrides: list[str]):
    """FedPer's client 0 of a 3-client loop after one full-batch local step (E = 1, B = ∞) from
    the initial model: the loop, what it received, its start weights and the result."""
    job = make_job(
        [
            "algo=fedper",
            "fl.num_clients=3",
            "fl.clients_per_round=1",
            "local.batch_size=null",
            *overrides,
        ]
    )
    data = Digits().load()
    torch.manual_seed(derive_seed(job.settings.seed, Stream.MODEL_INIT))
    module = job.model(input_shape=data.input_shape, num_classes=data.num_classes)
    clients = [torch.arange(i, 90, 3) for i in range(3)]
    loop = FederatedLoop(job.settings, Clients(data, clients), module, job.stages)
    algorithm = loop.algorithm
    ctx = loop.federation.round(1, (0,), (0.01,))
    received = algorithm.download(ctx, loop.server)
    start = algorithm.start_weights(ctx, received, None)
    callbacks = algorithm.local_callbacks(ctx, received, None)
    local = train_client(loop, 0, clients[0], 1, start, [0.01], callbacks)
    assert local.num_steps == 1
    return loop, received, start, local


def test_personal_only_training_moves_the_personal_layers_by_one_sgd_step_and_no_shared_bit(
    make_job: Callable[[list[str]], Job],
) -> None:
    """algo.train_shared=false (the FedAvg tutorial's §4.3 snippet, SGD 0.01 on the personal
    layers only): after one step the shared layers are bit-identical to the download and the
    head moved by exactly −η·∇, the gradient computed here in float64 on the client's examples
    (bound: one float32 rounding of the weight, plus 1e-4 of the step for the float32
    gradient's, a mean over 30 examples through three layers). Momentum and weight decay would
    move a parameter with a zero gradient; the dropped gradient moves none."""
    overrides = ["algo.train_shared=false", "optim.momentum=0.9", "optim.weight_decay=0.01"]
    loop, received, start, local = one_full_batch_step(make_job, overrides)
    assert set(received) == set(start) - HEAD
    for name, sent in received.items():
        assert torch.equal(local.weights[name], sent), name
    net = copy.deepcopy(loop.module.net).double()
    net.load_state_dict({k.removeprefix("net."): v.double() for k, v in start.items()})
    data, indices = loop.data, loop.client_indices[0]
    x, y = data.prepare(data.train_x[indices]).double(), data.train_y[indices]
    cross_entropy(net(x), y).backward()
    grads = {f"net.{name}": p.grad for name, p in net.named_parameters()}
    for name in HEAD:  # SGD's step with momentum's first buffer (the gradient) and decay
        step = 0.01 * (grads[name] + 0.01 * start[name].double())
        moved = start[name].double() - local.weights[name].double()
        assert step.abs().max() > 1e-4
        rounding = torch.finfo(torch.float32).eps * start[name].abs().max().item()
        bound = rounding + 1e-4 * step.abs().max().item()
        torch.testing.assert_close(moved, step, rtol=0, atol=bound)


def test_fedper_trains_the_shared_layers_by_default(make_job: Callable[[list[str]], Job]) -> None:
    """The same step with the default train_shared=true moves the shared layers too."""
    _, received, _, local = one_full_batch_step(make_job, [])
    assert all(not torch.equal(local.weights[name], t) for name, t in received.items())


def test_personal_only_fedper_keeps_the_initial_global_model_and_pays_the_shared_bytes(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """Through a whole run: nobody trains the shared layers, so the server's model is the initial
    one bit for bit after every round (zero deltas, still sent and counted byte for byte), while
    each client's head trained."""
    job = make_job([*PERSONAL, "algo=fedper", "algo.train_shared=false"])
    run_job(job, tmp_path)
    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    initial = build_module(job, Digits().load(), torch.device("cpu")).state_dict()
    server = checkpoint["server_weights"]
    assert all(torch.equal(server[k], initial[k]) for k in initial)
    shared = {k: t for k, t in server.items() if k not in HEAD}
    for row in read_rows(tmp_path):
        participants = int(float(row["participants"]))
        assert int(row["bytes_down"]) == int(row["bytes_up"]) == participants * nbytes(shared)
    states = [s for s in checkpoint["client_states"].values() if s]
    assert states and all(not torch.equal(s[k], initial[k]) for s in states for k in HEAD)


def test_personal_only_fedper_on_the_vectorized_engine_is_refused_in_one_line(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    overrides = [*TINY, "algo=fedper", "algo.train_shared=false", "fl.engine=vectorized"]
    with pytest.raises(ConfigError, match=r"PersonalOnly has none; .*fl.engine=sequential"):
        run_job(make_job(overrides), tmp_path)
