"""Client selection: each selector's rule, its randomness checked statistically with stated
tolerances, its state through a kill and resume, and participation as a result of the run."""

import csv
import json
import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import Tensor

from fedlight.core.context import Federation
from fedlight.core.errors import ConfigError
from fedlight.core.rng import Stream
from fedlight.core.tensors import StateDict, nbytes
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from fedlight.runs.outputs import jain_index
from fedlight.stages.pool import ClientPool, ModelQuality
from fedlight.stages.selection.base import Population
from fedlight.stages.selection.poisson import Poisson
from fedlight.stages.selection.power_of_choice import PowerOfChoice
from fedlight.stages.selection.round_robin import RoundRobin
from fedlight.stages.selection.weighted import SCORE, Weighted
from fedlight.store.checkpoint import load_checkpoint
from tests.conftest import TINY, rows_without_timings, run_killed_in_round

WEIGHTS = {"w": torch.zeros(3)}


def pool_of(sizes: list[int], losses: dict[int, float] | None = None) -> ClientPool:
    """Clients of the given sizes; client c reports loss `losses[c]` (default: c) and accuracy
    c / 100 for any model."""
    indices = [torch.arange(size) for size in sizes]

    def evaluate(weights: StateDict, client_indices: Tensor) -> ModelQuality:
        client = next(c for c, i in enumerate(indices) if i is client_indices)
        loss = float(client) if losses is None else losses[client]
        return ModelQuality(loss=loss, accuracy=client / 100)

    return ClientPool(indices, evaluate)


def test_round_robin_takes_every_client_once_per_ceil_n_over_k_rounds() -> None:
    federation = Federation(num_clients=10, trainable=frozenset())
    pool = pool_of([1] * 10)
    rounds = [
        RoundRobin().select(federation.round(r), 4, Population({}, pool, {})) for r in range(1, 13)
    ]
    assert all(len(set(chosen)) == 4 for chosen in rounds)
    for start in range(len(rounds) - 2):  # any ⌈10/4⌉ = 3 consecutive rounds cover everybody
        assert set().union(*rounds[start : start + 3]) == set(range(10))
    counts = Counter(c for chosen in rounds[:5] for c in chosen)  # 5 rounds · 4 = 2 passes
    assert set(counts.values()) == {2}
    assert rounds[0] != [0, 1, 2, 3]  # a seeded order, not the client ids


def test_weighted_selection_frequencies_match_the_softmax_of_the_scores() -> None:
    """K = 1, 20,000 draws: each client's frequency within 4.5 binomial standard deviations of
    softmax(score / T) (a false alarm about once in 10^5 tests for one client)."""
    selector = Weighted(decay=0.9, temperature=0.5)
    state = {SCORE: torch.tensor([0.0, 0.5, 1.0, 2.0], dtype=torch.float64)}
    federation = Federation(num_clients=4, trainable=frozenset())
    pool = pool_of([1] * 4)
    draws = 20_000
    counts = Counter(
        selector.select(federation.round(r), 1, Population(state, pool, {}))[0]
        for r in range(1, draws + 1)
    )
    expected = torch.softmax(state[SCORE] / 0.5, dim=0).tolist()
    for client, p in enumerate(expected):
        tolerance = 4.5 * math.sqrt(p * (1 - p) / draws)
        assert abs(counts[client] / draws - p) < tolerance, (client, counts[client] / draws, p)


def test_weighted_scores_move_toward_each_reported_accuracy() -> None:
    selector = Weighted(decay=0.95)
    federation = Federation(num_clients=3, trainable=frozenset())
    state = selector.init_state(federation)
    assert torch.equal(state[SCORE], torch.ones(3, dtype=torch.float64))
    pool = pool_of([5, 5, 5])
    report = selector.client_report(federation.round(1), 2, WEIGHTS, pool)
    assert report == {"accuracy": 0.02} and pool.bytes_down == 0  # its own model: nothing sent
    state = selector.update(federation.round(1), state, {2: report, 0: {"accuracy": 0.5}})
    assert state[SCORE].tolist() == [0.95 + 0.05 * 0.5, 1.0, 0.95 + 0.05 * 0.02]


def test_power_of_choice_trains_the_candidates_of_highest_loss() -> None:
    sizes = [0, 10, 10, 40, 10, 0, 30, 10]  # clients 0 and 5 hold no data: never candidates
    losses = {0: 9.0, 1: 0.5, 2: 3.0, 3: 1.0, 4: 2.0, 5: 9.0, 6: 0.1, 7: 4.0}
    federation = Federation(num_clients=8, trainable=frozenset())
    for round_index in range(1, 30):
        pool = pool_of(sizes, losses)
        seen = Population({}, pool, WEIGHTS)
        chosen = PowerOfChoice(candidates=4).select(federation.round(round_index), 2, seen)
        asked = pool.bytes_down // nbytes(WEIGHTS)
        assert asked == 4 and pool.bytes_up == 4 * 4  # the model down, one loss up, each
        assert not {0, 5} & set(chosen)
        # the two chosen have the highest losses of the four candidates, which we recompute
        rng = federation.round(round_index).generator(Stream.SELECTION)
        p = np.asarray(sizes, dtype=float) / sum(sizes)
        candidates = rng.choice(8, size=4, replace=False, p=p)
        assert chosen == sorted(sorted(candidates, key=lambda c: -losses[int(c)])[:2])


def test_power_of_choice_needs_between_k_and_n_candidates() -> None:
    with pytest.raises(ConfigError, match=r"^selection.candidates=3 must be between"):
        PowerOfChoice(candidates=3).check(num_clients=100, clients_per_round=10)
    with pytest.raises(ConfigError, match=r"^selection.candidates=101 must be between"):
        PowerOfChoice(candidates=101).check(num_clients=100, clients_per_round=10)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["selection.decay=1.0"], r"^selection.decay=1.0 must be in \[0, 1\)"),
        (["selection.temperature=0"], r"^selection.temperature=0 must be > 0"),
    ],
)
def test_bad_weighted_settings_are_refused(
    make_job: Callable[[list[str]], Job], overrides: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        make_job([*TINY, "selection=weighted", *overrides])


def test_poisson_takes_each_client_with_probability_k_over_n() -> None:
    """1,000 clients, q = 0.05, 400 rounds: the mean count within 4.5 standard deviations of
    K = 50 (sd of the mean sqrt(N q (1 − q) / rounds) = 0.34), every client's own rate near q."""
    federation = Federation(num_clients=1000, trainable=frozenset())
    pool = pool_of([1] * 1000)
    rounds = [
        Poisson().select(federation.round(r), 50, Population({}, pool, {})) for r in range(1, 401)
    ]
    counts = [len(chosen) for chosen in rounds]
    assert len(set(counts)) > 5  # the number varies
    assert abs(np.mean(counts) - 50) < 4.5 * math.sqrt(1000 * 0.05 * 0.95 / 400)
    per_client = Counter(c for chosen in rounds for c in chosen)
    assert abs(np.mean([per_client[c] / 400 for c in range(1000)]) - 0.05) < 0.002


def test_jain_index_of_participation() -> None:
    assert jain_index([3, 3, 3]) == 1.0
    assert jain_index([6, 0, 0]) == pytest.approx(1 / 3)
    assert jain_index([2, 1, 1]) == pytest.approx(16 / 18)
    assert jain_index([0, 0]) is None


SELECTORS = ["round_robin", "weighted", "power_of_choice", "poisson"]


@pytest.mark.parametrize("selector", SELECTORS)
def test_each_selector_resumes_bit_exactly(
    make_job: Callable[[list[str]], Job],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    selector: str,
) -> None:
    overrides = [
        *TINY,
        f"selection={selector}",
        "partition=dirichlet",
        *(["selection.candidates=6"] if selector == "power_of_choice" else []),
    ]
    run_job(make_job(overrides), tmp_path / "full")
    run_killed_in_round(make_job(overrides), tmp_path / "killed", 3, monkeypatch)
    run_job(make_job([*overrides, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    assert rows_without_timings(tmp_path / "resumed") == rows_without_timings(tmp_path / "full")
    full = load_checkpoint(tmp_path / "full" / "checkpoint.pt")
    resumed = load_checkpoint(tmp_path / "resumed" / "checkpoint.pt")
    for part in ("server_weights", "server_extras"):
        assert full[part].keys() == resumed[part].keys()
        assert all(torch.equal(full[part][k], resumed[part][k]) for k in full[part]), part
    assert full["participation"] == resumed["participation"]


def test_participation_is_written_for_every_client_and_summarized(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    run_job(make_job([*TINY, "selection=weighted"]), tmp_path / "run")
    counts = json.loads((tmp_path / "run" / "participation.json").read_text())["counts"]
    assert list(counts) == [str(c) for c in range(10)]
    with (tmp_path / "run" / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert sum(counts.values()) == sum(float(r["participants"]) for r in rows) == 4 * 4
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["participation_jain"] == pytest.approx(jain_index(list(counts.values())))
    assert summary["participation_min"] == min(counts.values())
    assert summary["participation_max"] == max(counts.values())
    assert (tmp_path / "run" / "participation.png").stat().st_size > 0
    # the weighted selector's reports: one float32 per participant on top of the upload
    model_bytes = 4 * (64 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10)
    assert {int(r["bytes_up"]) for r in rows} == {4 * (model_bytes + 4)}
