"""Asynchronous FL (issue 17, second part): FedAsync and FedBuff on the virtual clock. Staleness
functions and both server rules by hand, staleness on a scripted arrival order, FedBuff with
K = N and no staleness is synchronous FedAvg, and a run killed with clients in flight resumes
bit-exactly."""

import csv
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from fedlight.algorithms.asynchronous import Arrival
from fedlight.algorithms.fedasync import FedAsync
from fedlight.algorithms.fedbuff import FedBuff
from fedlight.algorithms.staleness import Staleness
from fedlight.core.context import Federation
from fedlight.core.errors import ConfigError
from fedlight.core.messages import ClientUpload, ServerState
from fedlight.drivers.asynchronous import AsynchronousLoop
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from tests.conftest import TINY, rows_without_timings, run_killed_in_round

FEDERATION = Federation(num_clients=4, trainable=frozenset({"w"}))


def read_rows(run_dir: Path) -> list[dict[str, float]]:
    with (run_dir / "metrics.csv").open() as f:
        return [{k: float(v) for k, v in row.items() if v} for row in csv.DictReader(f)]


@pytest.mark.parametrize(
    ("weights", "expected"),
    [
        (Staleness("constant"), [1, 1, 1, 1]),
        (Staleness("polynomial", a=0.5), [1, 2**-0.5, 3**-0.5, 11**-0.5]),
        (Staleness("hinge", a=2, b=1), [1, 1, 1 / 3, 1 / 19]),
        (Staleness("exponential", base=0.9), [1, 0.9, 0.81, 0.9**10]),
    ],
)
def test_staleness_functions_by_hand(weights: Staleness, expected: list[float]) -> None:
    assert [weights(tau) for tau in (0, 1, 2, 10)] == pytest.approx(expected, rel=1e-12)


def test_fedasync_mixes_the_arriving_model_with_alpha_times_its_staleness_weight() -> None:
    algorithm = FedAsync(alpha=0.5, staleness="exponential", staleness_base=0.5)
    x = {"w": torch.tensor([1.0, 2.0]), "steps": torch.tensor(3)}
    start = {"w": torch.tensor([0.0, 0.0]), "steps": torch.tensor(1)}
    upload = ClientUpload(0, 10, 2, {"w": torch.tensor([4.0, 8.0]), "steps": torch.tensor(5)})
    ctx = FEDERATION.round(3)
    mixed = algorithm.apply_arrivals(ctx, ServerState(x), [Arrival(upload, start, staleness=2)])
    alpha = 0.5 * 0.5**2  # α·s(τ)
    expected = (1 - alpha) * x["w"] + alpha * (start["w"] + upload.tensors["w"])
    torch.testing.assert_close(mixed.weights["w"], expected, rtol=0, atol=1e-7)
    assert mixed.weights["steps"].item() == 3  # integer buffers keep the server's value


def test_fedbuff_applies_the_staleness_weighted_mean_of_its_buffer_through_the_server_lr() -> None:
    algorithm = FedBuff(buffer_size=2, server_lr=2.0, staleness="polynomial", staleness_a=1.0)
    x = {"w": torch.tensor([1.0, 1.0])}
    server = algorithm.init_server(x, FEDERATION)
    deltas = [torch.tensor([1.0, 0.0]), torch.tensor([0.0, 3.0])]
    arrivals = [
        Arrival(ClientUpload(0, 30, 1, {"w": deltas[0]}), x, staleness=0),
        Arrival(ClientUpload(1, 10, 1, {"w": deltas[1]}), x, staleness=2),
    ]
    updated = algorithm.apply_arrivals(FEDERATION.round(1), server, arrivals)
    mean = (30 * 1.0 * deltas[0] + 10 * (1 / 3) * deltas[1]) / 40  # samples × s(τ) = 1/(τ+1)
    torch.testing.assert_close(updated.weights["w"], x["w"] + 2.0 * mean, rtol=0, atol=1e-7)


@pytest.mark.parametrize(
    ("measure", "expected"),
    [("start", [0, 0, 0, 3, 1, 0]), ("last_arrival", [0, 1, 1, 0, 2, 1])],
)
def test_staleness_is_the_versions_since_the_client_started_on_a_scripted_arrival_order(
    make_job: Callable[[list[str]], Job], tmp_path: Path, measure: str, expected: list[int]
) -> None:
    """Two clients, one 3.5× slower: the fast one arrives at d, 2d, 3d (τ = 0 each), the slow
    one at 3.5d having started from version 0 (τ = 3: three updates since it left), the fast
    one at 4d after starting from version 3 (τ = 1), then at 5d (τ = 0). The tutorial's measure,
    versions since the client's previous arrival, says 1 for the fresh fast updates and 0 for
    the slow one's first, three versions stale."""
    overrides = [
        f"algo.staleness_from={measure}",
        *TINY,
        "fl.num_clients=2",
        "fl.clients_per_round=2",
        "fl.rounds=6",
        "algo=fedasync",
        "algo.concurrency=2",
        "system=tiers",
        "system.fraction=0.5",
        "system.slowdown=3.5",
    ]
    run_job(make_job(overrides), tmp_path)
    rows = read_rows(tmp_path)
    assert [row["staleness_max"] for row in rows] == expected
    assert [row["server_version"] for row in rows] == [1, 2, 3, 4, 5, 6]
    fast = rows[0]["virtual_time"]
    slow_arrival = rows[3]["virtual_time"]
    assert 3 * fast < slow_arrival < 4 * fast
    assert rows[5]["virtual_time"] == pytest.approx(5 * fast, rel=1e-3)


SCRIPTED = [  # two clients, one 3.5× slower: fast, fast, fast, slow, fast, fast
    *TINY,
    "fl.num_clients=2",
    "fl.clients_per_round=2",
    "fl.rounds=6",
    "algo=fedasync",
    "algo.concurrency=2",
    "system=tiers",
    "system.fraction=0.5",
    "system.slowdown=3.5",
]


def test_the_tutorials_rule_mixes_each_arrival_with_weight_0_9_to_the_versions_since_its_last(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The FedAvg tutorial's §4.1 AsyncServer (experiment/async=fedasync_tutorial_rule): x ←
    (1 − w) x + w x_new with w = 0.9^τ itself (α = 1), τ the versions since the same client's
    previous arrival. On the scripted order the fast client arrives at versions 0, 1, 2 (τ = 0 at
    its first, then 1, 1), the slow one at version 3 (its first: τ = 0, though it trained from
    version 0), the fast one at 4 (τ = 4 − 2) and 5 (τ = 1). Each update is checked against the
    rule in float64 (bound: the float32 mixing's three roundings); a first arrival replaces the
    model; the run's final model is the last update's."""
    updates = []
    apply = FedAsync.apply_arrivals

    def recorded(self, ctx, server, arrivals):
        (arrival,) = arrivals
        arrived = {k: t + arrival.upload.tensors[k] for k, t in arrival.start.items()}
        mixed = apply(self, ctx, server, arrivals)
        updates.append((arrival.upload.client_id, arrival.staleness, server, arrived, mixed))
        return mixed

    monkeypatch.setattr(FedAsync, "apply_arrivals", recorded)
    rule = ["algo.alpha=1", "algo.staleness=exponential", "algo.staleness_from=last_arrival"]
    run_job(make_job([*SCRIPTED, *rule]), tmp_path)
    clients = [client for client, *_ in updates]
    fast, slow = clients[0], clients[3]
    assert clients == [fast, fast, fast, slow, fast, fast] and fast != slow
    assert [tau for _, tau, *_ in updates] == [0, 1, 1, 0, 2, 1]
    assert [row["staleness_max"] for row in read_rows(tmp_path)] == [0, 1, 1, 0, 2, 1]
    eps = torch.finfo(torch.float32).eps
    for _, tau, server, arrived, mixed in updates:
        weight = 0.9**tau
        for name, current in server.weights.items():
            x, new = current.double(), arrived[name].double()
            expected = (1 - weight) * x + weight * new
            bound = 3 * eps * (x.abs() + new.abs())
            assert ((mixed.weights[name].double() - expected).abs() <= bound).all(), (tau, name)
    final = torch.load(tmp_path / "checkpoint.pt", weights_only=True)["server_weights"]
    assert all(torch.equal(final[k], t) for k, t in updates[-1][-1].weights.items())


def test_fedbuff_with_every_client_buffered_and_no_staleness_is_synchronous_fedavg(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """K = N = concurrency and a clock on which every client takes equally long (no compute
    time, equal bytes): every update waits for all N, which all started from the newest model,
    with the batches FedAvg's round r draws for each client."""
    common = [*TINY, "fl.num_clients=4", "fl.rounds=3"]
    buffered = [
        "algo=fedbuff",
        "algo.buffer_size=4",
        "algo.concurrency=4",
        "system=homogeneous",
        "system.seconds_per_example=0",
    ]
    run_job(make_job([*common, *buffered]), tmp_path / "fedbuff")
    run_job(make_job([*common, "fl.clients_per_round=4"]), tmp_path / "fedavg")
    buff, avg = (
        torch.load(tmp_path / name / "checkpoint.pt", weights_only=True)["server_weights"]
        for name in ("fedbuff", "fedavg")
    )
    for name, weight in avg.items():
        torch.testing.assert_close(buff[name], weight, rtol=0, atol=1e-6)
    assert [row["staleness_max"] for row in read_rows(tmp_path / "fedbuff")] == [0, 0, 0]


def assert_resumed_as_the_full_run(tmp_path: Path) -> None:
    """tmp_path/resumed has every number of tmp_path/full: its rows and its final weights."""
    assert rows_without_timings(tmp_path / "resumed") == rows_without_timings(tmp_path / "full")
    full, resumed = (
        torch.load(tmp_path / name / "checkpoint.pt", weights_only=True)
        for name in ("full", "resumed")
    )
    for name, weight in full["server_weights"].items():
        assert torch.equal(resumed["server_weights"][name], weight)


@pytest.mark.parametrize("algo", ["fedasync", "fedbuff"])
def test_a_run_killed_with_clients_in_flight_resumes_bit_exactly(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, algo: str
) -> None:
    overrides = [
        *TINY,
        "fl.rounds=5",
        f"algo={algo}",
        "algo.concurrency=5",
        "system=lognormal",
        "partition=dirichlet",
    ]
    if algo == "fedbuff":
        overrides.append("algo.buffer_size=2")
    run_job(make_job(overrides), tmp_path / "full")
    run_killed_in_round(make_job(overrides), tmp_path / "killed", 3, monkeypatch, AsynchronousLoop)
    killed = torch.load(tmp_path / "killed" / "checkpoint.pt", weights_only=True)
    assert len(killed["in_flight"]) == 5
    run_job(make_job([*overrides, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    assert_resumed_as_the_full_run(tmp_path)


def test_evaluation_every_so_many_virtual_seconds_survives_a_resume(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row per server update, with test metrics at the first update past each multiple of
    eval.every_seconds (and the last); a run killed and resumed gives the same rows."""
    overrides = [
        *TINY,
        "fl.rounds=12",
        "algo=fedasync",
        "algo.concurrency=4",
        "system=tiers",
        "eval.every_seconds=0.5",
    ]
    run_job(make_job(overrides), tmp_path / "full")
    rows = read_rows(tmp_path / "full")
    assert [row["round"] for row in rows] == list(range(1, 13))
    evaluated_at = 0.0  # the virtual time of the last evaluation
    for row in rows[:-1]:
        due = int(row["virtual_time"] / 0.5) > int(evaluated_at / 0.5)
        assert ("test_accuracy" in row) == due
        evaluated_at = row["virtual_time"] if due else evaluated_at
    assert "test_accuracy" in rows[-1] and 1 < sum("test_loss" in row for row in rows) < 12
    run_killed_in_round(make_job(overrides), tmp_path / "killed", 7, monkeypatch, AsynchronousLoop)
    run_job(make_job([*overrides, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    assert rows_without_timings(tmp_path / "resumed") == rows_without_timings(tmp_path / "full")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([], r"^algo=fedasync runs on the system's virtual clock; choose a system model"),
        (["system=tiers", "fl.workers=2"], r"^algo=fedasync runs its event queue in one process"),
        (
            ["system=tiers", "attack=alie", "attack.fraction=0.2"],
            r"^attack=alie does not apply to algo=fedasync: it forges from a round's benign",
        ),
        (
            ["system=tiers", "privacy=dp_fedavg"],
            r"^privacy=dp_fedavg does not apply to algo=fedasync: its accountant composes",
        ),
        (
            ["system=tiers", "selection=round_robin"],
            r"^selection=round_robin does not apply to algo=fedasync: its clients are drawn",
        ),
        (["system=tiers", "system.deadline=3"], r"^algo=fedasync has no rounds to set a deadline"),
        (["system=tiers", "algo.staleness=linear"], r"^algo.staleness=linear is not a staleness"),
        (
            ["eval.every_seconds=2", "algo=fedavg"],
            r"^eval.every_seconds=2.0 counts virtual seconds",
        ),
    ],
)
def test_asynchronous_runs_refuse_what_they_cannot_run_in_one_line(
    make_job: Callable[[list[str]], Job], overrides: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        make_job([*TINY, "algo=fedasync", *overrides])


# What the shared client pipeline gives asynchronous runs (issue 32, item 5) ---------------------

ASYNC_ATTACKED = [
    *TINY,
    "fl.rounds=5",
    "algo=fedbuff",
    "algo.buffer_size=2",
    "algo.concurrency=5",
    "system=lognormal",
    "attack=sign_flip",
    "attack.fraction=0.3",
]


def test_fedbuff_with_an_attack_and_top_k_with_error_feedback_resumes_bit_exactly(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attack acts on its clients' uploads (malicious arrivals are counted and the model
    differs from the clean run's), top-k keeps each client's residual in its state, and a run
    killed with clients in flight resumes to the uninterrupted run's every number."""
    overrides = [*ASYNC_ATTACKED, "upload=[topk]", "upload.topk.ratio=0.1"]
    run_job(make_job(overrides), tmp_path / "full")
    rows = read_rows(tmp_path / "full")
    assert sum(row["malicious"] for row in rows) > 0
    clean = [o for o in overrides if not o.startswith("attack")]
    run_job(make_job(clean), tmp_path / "clean")
    assert [r["test_loss"] for r in read_rows(tmp_path / "clean")] != [r["test_loss"] for r in rows]
    run_killed_in_round(make_job(overrides), tmp_path / "killed", 3, monkeypatch, AsynchronousLoop)
    killed = torch.load(tmp_path / "killed" / "checkpoint.pt", weights_only=True)
    assert any(
        k.startswith("wire/upload.topk/") for s in killed["client_states"].values() for k in s
    )
    run_job(make_job([*overrides, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    assert_resumed_as_the_full_run(tmp_path)


def test_fedasync_runs_example_level_dp_sgd_accounted_at_each_arrival(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """DP-SGD trains each dispatch with per-example clipping and noise; the accountant counts
    the steps of each arrival's client, so ε grows with the updates and the steps it holds sum
    to the arrived clients' steps."""
    overrides = [*TINY, "fl.rounds=4", "algo=fedasync", "system=tiers", "privacy=dp_sgd"]
    run_job(make_job(overrides), tmp_path)
    epsilons = [row["epsilon"] for row in read_rows(tmp_path)]
    assert all(e > 0 for e in epsilons) and epsilons == sorted(epsilons)
    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    steps = checkpoint["stage_states"]["privacy"]["steps"]
    assert int((steps > 0).sum()) >= 1 and int(steps.sum()) > 0


def test_dropout_makes_clients_drawn_for_a_slot_unavailable_and_resumes_bit_exactly(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With system.dropout a drawn client may be unavailable: the slot takes another, the
    update counts it in dropped_out, the run differs from the one without dropout, and a run
    killed mid-way resumes to the same numbers."""
    overrides = [*TINY, "fl.rounds=6", "algo=fedasync", "algo.concurrency=4", "system=tiers"]
    dropping = [*overrides, "system.dropout=0.4"]
    run_job(make_job(dropping), tmp_path / "full")
    rows = read_rows(tmp_path / "full")
    assert sum(row["dropped_out"] for row in rows) > 0
    run_job(make_job(overrides), tmp_path / "none")
    assert [r["test_loss"] for r in read_rows(tmp_path / "none")] != [r["test_loss"] for r in rows]
    run_killed_in_round(make_job(dropping), tmp_path / "killed", 4, monkeypatch, AsynchronousLoop)
    run_job(make_job([*dropping, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    assert rows_without_timings(tmp_path / "resumed") == rows_without_timings(tmp_path / "full")
