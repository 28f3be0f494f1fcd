"""The system model (issue 17, first part): client speeds drawn from the seed, a synchronous
round's virtual time is its slowest participant's, a deadline loses the stragglers' updates and
keeps their state, dropouts train nothing, and runs resume bit-exactly and agree across workers."""

import csv
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from fedlight.algorithms.fedavg import UPDATE, FedAvg
from fedlight.core.context import Federation
from fedlight.core.errors import ConfigError
from fedlight.core.messages import ClientUpload
from fedlight.core.rng import Stream, numpy_generator
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from fedlight.system.base import System
from fedlight.system.homogeneous import Homogeneous
from fedlight.system.lognormal import LogNormal
from fedlight.system.tiers import Tiers
from fedlight.system.uniform import Uniform
from tests.conftest import TINY, rows_without_timings, run_cli, run_killed_in_round

# Every client in every round, of unequal sizes.
ALL_CLIENTS = [*TINY, "fl.clients_per_round=10", "partition=dirichlet", "fl.rounds=3"]
ONE_ROUND_ALL_CLIENTS = [*ALL_CLIENTS[:-1], "fl.rounds=1"]


def read_rows(run_dir: Path) -> list[dict[str, float]]:
    with (run_dir / "metrics.csv").open() as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def test_tiers_slow_down_a_seeded_fraction_of_the_clients_in_compute_and_link() -> None:
    speeds = Tiers(fraction=0.2, slowdown=10.0).speeds(100, seed=3)
    slow = np.flatnonzero(speeds.per_example > 1e-3)
    assert len(slow) == 20
    assert np.allclose(speeds.per_example[slow], 1e-2)
    assert np.array_equal(np.flatnonzero(speeds.per_byte_up > 1e-6), slow)
    assert np.array_equal(np.flatnonzero(speeds.per_byte_down > 1e-7), slow)
    again = Tiers(fraction=0.2, slowdown=10.0).speeds(100, seed=3)
    assert np.array_equal(again.per_example, speeds.per_example)
    other = Tiers(fraction=0.2, slowdown=10.0).speeds(100, seed=4)
    assert not np.array_equal(other.per_example, speeds.per_example)


@pytest.mark.parametrize(
    "system", [Uniform(low=2.0, high=5.0), LogNormal(sigma=0.5), Homogeneous()]
)
def test_slowdowns_follow_the_options_distribution(system: System) -> None:
    speeds = system.speeds(20_000, seed=0)
    compute = speeds.per_example / system.seconds_per_example
    link = speeds.per_byte_up / system.seconds_per_byte_up
    assert np.allclose(speeds.per_byte_down / system.seconds_per_byte_down, link)
    if isinstance(system, Uniform):
        assert compute.min() >= 2.0 and compute.max() <= 5.0
        assert compute.mean() == pytest.approx(3.5, abs=0.03)
    elif isinstance(system, LogNormal):
        assert np.log(compute).std() == pytest.approx(0.5, abs=0.01)
        assert np.median(link) == pytest.approx(1.0, abs=0.02)
    else:
        assert np.all(compute == 1) and np.all(link == 1)
    if not isinstance(system, Homogeneous):  # compute and link drawn independently
        assert abs(np.corrcoef(compute, link)[0, 1]) < 0.03


def test_a_synchronous_round_lasts_as_long_as_its_slowest_participant(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """By hand: each client's bytes down + examples trained (E·n_k) + bytes up at its speeds;
    the round's virtual time is the largest, and virtual_time their running sum."""
    job = make_job([*ALL_CLIENTS, "system=tiers", "system.fraction=0.3", "local.epochs=2"])
    run_job(job, tmp_path)
    data = job.data.load()
    sizes = [
        len(s)
        for s in job.partition(data.train_y.numpy(), 10, numpy_generator(0, Stream.PARTITION))
    ]
    speeds = job.stages.system.speeds(10, seed=0)
    clock = 0.0
    for row in read_rows(tmp_path):
        participants = [c for c in range(10) if sizes[c]]
        assert row["participants"] == len(participants)
        per_client = row["bytes_down"] / len(participants)  # the same model to each
        assert row["bytes_up"] / len(participants) == per_client
        times = [
            speeds.seconds(c, int(per_client), 2 * sizes[c], int(per_client)) for c in participants
        ]
        assert row["round_seconds"] == pytest.approx(max(times), rel=1e-12)
        clock += max(times)
        assert row["virtual_time"] == pytest.approx(clock, rel=1e-12)
        assert row["stragglers"] == row["dropped_out"] == 0


def test_stragglers_past_the_deadline_lose_their_updates_and_keep_their_state(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """A deadline between the fast and the slow tier: the slow clients are stragglers every
    round, their SCAFFOLD control variates are never written, the round lasts the deadline; a
    deadline nobody meets keeps the initial model."""
    overrides = [*ALL_CLIENTS, "algo=scaffold", "system=tiers", "system.fraction=0.3"]
    job = make_job([*overrides, "system.deadline=1.0"])
    run_job(job, tmp_path / "deadline")
    speeds = job.stages.system.speeds(10, seed=0)
    slow = set(np.flatnonzero(speeds.per_example > 1e-3).tolist())
    rows = read_rows(tmp_path / "deadline")
    for row in rows:
        assert row["stragglers"] == len(slow) and row["round_seconds"] == 1.0
    assert rows[-1]["virtual_time"] == pytest.approx(3.0)
    states = torch.load(tmp_path / "deadline" / "checkpoint.pt", weights_only=True)["client_states"]
    written = {int(client) for client, state in states.items() if state}
    assert written == set(range(10)) - slow

    run_job(make_job([*overrides, "system.deadline=1e-6"]), tmp_path / "nobody")
    accuracies = {row["test_accuracy"] for row in read_rows(tmp_path / "nobody")}
    assert len(accuracies) == 1  # the model never moved


def test_dropouts_are_drawn_per_round_and_client_and_train_nothing(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    job = make_job([*ALL_CLIENTS, "partition=iid", "system=homogeneous", "system.dropout=0.4"])
    run_job(job, tmp_path)
    rows = read_rows(tmp_path)
    failed = [row["dropped_out"] for row in rows]
    assert [row["participants"] for row in rows] == [10 - f for f in failed]
    expected = [
        sum(numpy_generator(0, Stream.SYSTEM, r, c).random() < 0.4 for c in range(10))
        for r in (1, 2, 3)
    ]
    assert failed == expected and sum(failed) > 0
    per_client = rows[0]["bytes_down"] / rows[0]["participants"]
    assert all(row["bytes_down"] == per_client * row["participants"] for row in rows)


def test_a_killed_run_with_a_deadline_and_dropouts_resumes_bit_exactly(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    overrides = [
        *TINY,
        "system=lognormal",
        "system.deadline=0.6",
        "system.dropout=0.2",
        "checkpoint.every=1",
    ]
    run_job(make_job(overrides), tmp_path / "full")
    run_killed_in_round(make_job(overrides), tmp_path / "killed", 3, monkeypatch)
    run_job(make_job([*overrides, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    full = rows_without_timings(tmp_path / "full")
    assert rows_without_timings(tmp_path / "resumed") == full
    assert sum(float(row["stragglers"]) for row in full) > 0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["system.deadline=5"], r"^system.deadline and system.dropout need a system model"),
        (["system=tiers", "system.dropout=1"], r"^system.dropout=1 must lie in \[0, 1\)"),
        (["system=tiers", "system.deadline=0"], r"^system.deadline=0 must be > 0"),
        (["system=uniform", "system.low=3", "system.high=2"], r"^system.low=3 and system.high=2"),
        (["system=tiers", "system.fraction=1.5"], r"^system.fraction=1.5 must lie in"),
    ],
)
def test_bad_system_settings_are_refused_in_one_line(
    make_job: Callable[[list[str]], Job], overrides: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        make_job([*TINY, *overrides])


def test_a_late_update_is_left_out_and_the_mean_renormalized_on_one_worker_and_across_two() -> None:
    """`drop_late` renormalizes the sample-weighted mean over the updates that came in time, alike
    when one worker streams every upload and when two exchange partial sums."""
    federation = Federation(num_clients=3, trainable=frozenset({"w"}))
    ctx = federation.round(1, selected=(0, 1, 2), lrs=(0.1,))
    uploads = [
        ClientUpload(
            c, num_samples=10 * (c + 1), num_steps=1, tensors={"w": torch.tensor([c + 1.0])}
        )
        for c in range(3)
    ]
    algorithm = FedAvg()
    counts = [u.num_samples for u in uploads]
    one = algorithm.start_aggregation(counts)
    one.add(algorithm.contribution(ctx, uploads[0]))
    one.drop_late(uploads[1].contributor)
    one.add(algorithm.contribution(ctx, uploads[2]))
    expected = (10 * 1.0 + 30 * 3.0) / 40
    assert one.results()[UPDATE]["w"].item() == pytest.approx(expected)
    shares = [algorithm.start_aggregation(counts), algorithm.start_aggregation(counts)]
    shares[0].add(algorithm.contribution(ctx, uploads[0]))
    shares[1].drop_late(uploads[1].contributor)
    shares[1].add(algorithm.contribution(ctx, uploads[2]))
    merged = algorithm.start_aggregation(counts)
    merged.combine(
        [s.partials() for s in shares],
        [u.contributor for u in uploads],
        [False] * 3,
        [False, True, False],
    )
    assert merged.late == one.late == [1] and merged.rejected == []
    assert merged.results()[UPDATE]["w"].item() == pytest.approx(expected)


def clients_and_sizes(job: Job) -> tuple[list[int], list[int]]:
    """The clients holding data under the job's partition of 10 clients (seed 0), and every
    client's number of training examples."""
    labels = job.data.load().train_y.numpy()
    sizes = [len(s) for s in job.partition(labels, 10, numpy_generator(0, Stream.PARTITION))]
    return [c for c in range(10) if sizes[c]], sizes


def test_the_power_of_choice_probe_runs_on_the_clock_before_training(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """By hand: every client holding data is a candidate and trains. The probe sends each the
    model, it evaluates its n_k examples and answers with one float32; training starts once the
    slowest answer is in. A round lasts the slowest probe plus the slowest participant (model
    down, E·n_k examples, model up); with a deadline, which counts from the start of training,
    the slowest probe plus the deadline."""
    overrides = [
        *ONE_ROUND_ALL_CLIENTS,
        "selection=power_of_choice",
        "selection.candidates=10",
        "system=tiers",
        "system.fraction=0.3",
        "local.epochs=2",
    ]
    job = make_job(overrides)
    run_job(job, tmp_path / "probe")
    run_job(make_job([*overrides, "system.deadline=1.0"]), tmp_path / "deadline")
    clients, sizes = clients_and_sizes(job)
    speeds = job.stages.system.speeds(10, seed=0)
    rows = read_rows(tmp_path / "probe")
    model = int(rows[0]["bytes_up"] - 4 * len(clients)) // len(clients)
    probe = max(speeds.seconds(c, model, sizes[c], 4) for c in clients)
    training = max(speeds.seconds(c, model, 2 * sizes[c], model) for c in clients)
    for row in rows:
        assert row["participants"] == len(clients)
        assert row["bytes_down"] == 2 * len(clients) * model  # the probe's and training's
        assert row["round_seconds"] == pytest.approx(probe + training, rel=1e-12)
    assert rows[-1]["virtual_time"] == pytest.approx(probe + training, rel=1e-12)
    for row in read_rows(tmp_path / "deadline"):
        assert row["stragglers"] > 0
        assert row["round_seconds"] == pytest.approx(probe + 1.0, rel=1e-12)


def test_a_weighted_participants_evaluation_of_its_model_is_on_the_clock(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """By hand: a weighted-selection participant also evaluates its trained model on its n_k
    examples (E = 1: as many as it trained on) and sends the accuracy (one float32) with its
    upload."""
    overrides = [*ONE_ROUND_ALL_CLIENTS, "selection=weighted", "system=tiers"]
    job = make_job(overrides)
    run_job(job, tmp_path)
    clients, sizes = clients_and_sizes(job)
    speeds = job.stages.system.speeds(10, seed=0)
    for row in read_rows(tmp_path):
        model = int(row["bytes_down"]) // len(clients)
        times = [speeds.seconds(c, model, sizes[c] + sizes[c], model + 4) for c in clients]
        assert row["round_seconds"] == pytest.approx(max(times), rel=1e-12)


def test_rounds_that_nobody_finishes_in_time_are_said_once(tmp_path: Path) -> None:
    """Probe SA3: a deadline that no participant meets trains nothing, with secure aggregation
    as without; the first such round says so in one line, naming the setting to raise."""
    late = ["system=tiers", "system.deadline=1e-6", "secure_aggregation=pairwise"]
    ran = run_cli(*TINY, "fl.rounds=2", *late, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    said = [line for line in ran.stderr.splitlines() if "finished within" in line]
    assert said == [
        "fedlight: round 1: none of its 4 participants finished within system.deadline=1e-06 "
        "virtual seconds, so nothing was aggregated and the model is kept (stragglers are "
        "counted in metrics.csv, column stragglers); raise system.deadline"
    ]
