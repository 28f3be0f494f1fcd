"""The robust aggregators (`aggregator=`) against hand computations, their refusals, and every
aggregator YAML composed into a working server."""

import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import Tensor

from fedlight.aggregation.base import Aggregator, RoundRefused, client_weight
from fedlight.aggregation.bulyan import Bulyan, closest_to_median_mean
from fedlight.aggregation.geometric_median import GeometricMedian
from fedlight.aggregation.krum import Krum, pairwise_squared_distances
from fedlight.aggregation.median import Median
from fedlight.aggregation.multi_krum import MultiKrum
from fedlight.aggregation.norm_clip import NormClip
from fedlight.aggregation.robust_base import flatten
from fedlight.aggregation.trimmed_mean import TrimmedMean
from fedlight.algorithms.fedavg import UPDATE, FedAvg
from fedlight.cli.schema import CONF_DIR
from fedlight.core.context import Federation
from fedlight.core.errors import ConfigError
from fedlight.core.messages import ClientUpload
from fedlight.core.tensors import StateDict
from fedlight.runs.job import Job
from tests.helpers.algorithms import aggregate as aggregate_uploads

AGGREGATOR_YAMLS = sorted(p.stem for p in (Path(CONF_DIR) / "aggregator").glob("*.yaml"))
SHAPES = {"w": (2, 2), "b": (1,)}  # two tensors of different shapes: d = 5
D = 5


def as_update(row: Tensor) -> StateDict:
    """A row of 5 numbers as a state dict of a [2, 2] and a [1] tensor."""
    return {"w": row[:4].reshape(2, 2).clone(), "b": row[4:].clone()}


def aggregate(
    aggregator: Aggregator, rows: list[list[float]], weights: list[float] | None = None
) -> Tensor:
    """The aggregate of `rows` (one update each) through a round's accumulator, flattened back;
    checks that it comes back in the updates' shapes."""
    weights = [1.0] * len(rows) if weights is None else weights
    accumulator = aggregator.accumulator(sum(weights), len(rows))
    for row, weight in zip(rows, weights, strict=True):
        accumulator.add(as_update(torch.tensor(row, dtype=torch.float32)), weight)
    result = accumulator.result()
    assert result is not None
    assert {name: tuple(t.shape) for name, t in result.items()} == SHAPES
    assert all(t.dtype == torch.float32 for t in result.values())
    return flatten(result)


def column(rows: list[list[float]], j: int) -> list[float]:
    return [row[j] for row in rows]


def hand_median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def hand_distance(a: list[float], b: list[float]) -> float:
    return sum((x - y) ** 2 for x, y in zip(a, b, strict=True))


def hand_krum_scores(rows: list[list[float]], indices: list[int], neighbours: int) -> list[float]:
    scores = []
    for i in indices:
        others = sorted(hand_distance(rows[i], rows[j]) for j in indices if j != i)
        scores.append(sum(others[:neighbours]))
    return scores


def assert_close(actual: Tensor, expected: list[float], tol: float = 1e-5) -> None:
    assert torch.allclose(actual, torch.tensor(expected), atol=tol, rtol=tol), (actual, expected)


# Integer-valued rows with repeated values per coordinate: ties everywhere, exact in float32.
TIED = [
    [1.0, 3.0, 0.0, 4.0, 2.0],
    [1.0, 1.0, 1.0, 2.0, 2.0],
    [1.0, 3.0, 2.0, 2.0, 2.0],
    [5.0, 5.0, 3.0, 2.0, -7.0],
    [5.0, 5.0, 4.0, 9.0, 2.0],
    [2.0, 3.0, 4.0, 2.0, 6.0],
    [1.0, 0.0, 9.0, 2.0, 2.0],
]


@pytest.mark.parametrize("n", [5, 6, 7])
def test_median_is_the_middle_value_or_the_mean_of_the_two_middle_ones(n: int) -> None:
    rows = TIED[:n]
    expected = [hand_median(column(rows, j)) for j in range(D)]
    assert_close(aggregate(Median(), rows), expected)


def test_median_of_even_n_averages_distinct_middle_values() -> None:
    rows = [[0.0] * D, [1.0] * D, [3.0] * D, [100.0] * D]
    assert_close(aggregate(Median(), rows), [2.0] * D)


def hand_trimmed_mean(values: list[float], beta: float) -> float:
    k = math.floor(beta * len(values))
    kept = sorted(values)[k : len(values) - k]
    return sum(kept) / len(kept)


@pytest.mark.parametrize(("n", "beta"), [(7, 0.2), (7, 0.3), (6, 0.25), (5, 0.0), (4, 0.49)])
def test_trimmed_mean_matches_hand_computation_with_ties(n: int, beta: float) -> None:
    rows = TIED[:n]
    expected = [hand_trimmed_mean(column(rows, j), beta) for j in range(D)]
    assert_close(aggregate(TrimmedMean(beta=beta), rows), expected)


def test_trimmed_mean_loses_no_precision_to_a_huge_trimmed_value() -> None:
    rows = [[0.001 * (i + 1)] * D for i in range(4)] + [[1e30] * D]
    # k = 1: 1e30 and 0.001 removed, the mean of 0.002, 0.003, 0.004.
    assert_close(aggregate(TrimmedMean(beta=0.2), rows), [0.003] * D, tol=1e-7)


def test_trimmed_mean_with_beta_below_half_always_keeps_a_value() -> None:
    for n in range(1, 40):
        assert n - 2 * math.floor(0.4999999999 * n) >= 1
    assert_close(aggregate(TrimmedMean(beta=0.4999999999), TIED[:4]), [1.0, 3.0, 1.5, 2.0, 2.0])


def test_pairwise_distances_match_hand_computation() -> None:
    rows = [[1000.0 + x for x in row] for row in TIED]  # a large common component
    distances = pairwise_squared_distances(torch.tensor(rows))
    expected = [[hand_distance(a, b) for b in rows] for a in rows]
    # Uncentered, float32 cancellation would cost about 1000² · 5 · 1e-7 ≈ 0.5.
    assert (distances - torch.tensor(expected, dtype=torch.float64)).abs().max() < 1e-3
    assert torch.equal(distances, distances.T)
    assert torch.equal(distances.diagonal(), torch.zeros(len(rows), dtype=torch.float64))


@pytest.mark.parametrize("f", [0, 1, 2])
def test_krum_picks_the_row_of_lowest_score(f: int) -> None:
    n = len(TIED)
    scores = hand_krum_scores(TIED, list(range(n)), n - f - 2)
    best = scores.index(min(scores))  # the first of equal scores
    assert_close(aggregate(Krum(f=f), TIED), TIED[best])


def test_krum_picks_from_the_honest_cluster_against_colluding_attackers() -> None:
    honest = [[t, 0.0, 0.0, 0.0, 0.0] for t in (0.0, 1.0, 3.0, 4.0, 5.0, 7.0, 10.0)]
    attackers = [[1000.0] * D, [1000.0] * D]  # identical: distance 0 to each other
    rows = attackers + honest
    # f = 2, 5 neighbours: the honest scores are 100, 66, 34, 36, 50, 74 and 200.
    assert hand_krum_scores(rows, list(range(9)), 5)[2:] == [100, 66, 34, 36, 50, 74, 200]
    assert_close(aggregate(Krum(f=2), rows), honest[2])


def test_krum_ties_go_to_the_first_update() -> None:
    # Each row one value in every coordinate; their means (1 and 2) are exact in float32.
    rows = [[0.0] * D, [2.0] * D, [2.0] * D, [0.0] * D, [1.0] * D]
    # f = 0, 3 neighbours: scores 25, 25, 25, 25 and 15.
    assert_close(aggregate(Krum(f=0), rows), [1.0] * D)
    # Scores 40, 40, 40, 40 and 340: the first.
    assert_close(aggregate(Krum(f=0), [*rows[:4], [6.0] * D]), [0.0] * D)


@pytest.mark.parametrize(("f", "m"), [(1, None), (1, 2), (2, 3), (0, 7)])
def test_multi_krum_averages_the_rows_of_lowest_scores(f: int, m: int | None) -> None:
    n = len(TIED)
    scores = hand_krum_scores(TIED, list(range(n)), n - f - 2)
    order = sorted(range(n), key=lambda i: (scores[i], i))[: n - f if m is None else m]
    expected = [sum(TIED[i][j] for i in order) / len(order) for j in range(D)]
    assert_close(aggregate(MultiKrum(f=f, m=m), TIED), expected)


def test_multi_krum_averages_the_honest_rows_with_their_weights() -> None:
    honest = [[1.0, 2.0, 3.0, 4.0, 5.0], [1.2, 2.0, 3.0, 4.0, 5.0], [1.1, 2.2, 3.0, 4.0, 5.0]]
    honest += [[1.0, 2.1, 3.1, 4.0, 5.0], [0.9, 2.0, 3.0, 4.2, 5.0]]
    rows = [*honest, [100.0] * D]
    weights = [1.0, 2.0, 3.0, 4.0, 5.0, 100.0]
    result = aggregate(MultiKrum(f=1, weighting="samples"), rows, weights)  # m = n − f = 5
    expected = [
        sum(w * row[j] for w, row in zip(weights[:5], honest, strict=True)) / 15 for j in range(D)
    ]
    assert_close(result, expected)


def hand_bulyan(rows: list[list[float]], f: int) -> list[float]:
    remaining = list(range(len(rows)))
    selected = []
    for _ in range(len(rows) - 2 * f):
        r = len(remaining)
        neighbours = max(r - f - 2, min(1, r - 1))
        scores = hand_krum_scores(rows, remaining, neighbours)
        selected.append(remaining.pop(scores.index(min(scores))))
    beta = len(selected) - 2 * f
    result = []
    for j in range(D):
        values = sorted(rows[i][j] for i in selected)
        median = hand_median(values)
        closest = sorted(values, key=lambda v: abs(v - median))[:beta]  # stable: lower first
        result.append(sum(closest) / beta)
    return result


@pytest.mark.parametrize(("rows", "f"), [(TIED, 1), (TIED, 0), (TIED + TIED[:4], 2)])
def test_bulyan_matches_hand_computation_with_ties(rows: list[list[float]], f: int) -> None:
    assert_close(aggregate(Bulyan(f=f), rows), hand_bulyan(rows, f))


def test_bulyan_takes_tied_values_from_below_the_median_first() -> None:
    # The 3 values closest to the median 3 of [1, 3, 3, 5, 5] are 3, 3 and 1 (1 and 5 both at
    # distance 2), in every column whatever the order of the rows.
    rows = torch.tensor([[1.0, 5.0], [3.0, 3.0], [5.0, 1.0], [3.0, 5.0], [5.0, 3.0]])
    assert_close(closest_to_median_mean(rows, 3), [7 / 3, 7 / 3])
    assert_close(closest_to_median_mean(rows, 5), [17 / 5, 17 / 5])
    assert_close(closest_to_median_mean(rows, 1), [3.0, 3.0])


def hand_weiszfeld(
    rows: list[list[float]], alphas: list[float], nu: float, steps: int
) -> list[float]:
    def weighted(weights: list[float]) -> list[float]:
        return [
            sum(w * row[j] for w, row in zip(weights, rows, strict=True)) / sum(weights)
            for j in range(D)
        ]

    v = weighted(alphas)
    for _ in range(steps):
        betas = [
            a / max(nu, math.sqrt(hand_distance(v, row)))
            for a, row in zip(alphas, rows, strict=True)
        ]
        v = weighted(betas)
    return v


def test_geometric_median_is_smoothed_weiszfeld_from_the_weighted_mean() -> None:
    alphas = [1.0, 2.0, 1.0, 3.0, 1.0, 1.0, 2.0]
    median = GeometricMedian(max_iterations=3, tolerance=0.0, weighting="samples")
    assert_close(aggregate(median, TIED, alphas), hand_weiszfeld(TIED, alphas, 1e-6, 3))


def test_geometric_median_of_points_on_a_line_is_their_median() -> None:
    rows = [[t, 2 * t, 0.0, -t, 1.0] for t in (0.0, 1.0, 2.0, 3.0, 100.0)]
    median = GeometricMedian(max_iterations=200, tolerance=0.0)
    assert_close(aggregate(median, rows), rows[2], tol=1e-3)


def test_geometric_median_of_symmetric_points_is_their_center() -> None:
    center = [1.0, -2.0, 3.0, 0.5, 4.0]
    rows = []
    for j in range(D):
        for sign in (1.0, -1.0):
            row = list(center)
            row[j] += sign * (j + 1)
            rows.append(row)
    assert_close(aggregate(GeometricMedian(), rows), center)


def test_geometric_median_goes_to_a_point_holding_the_weighted_majority() -> None:
    rows = [[1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0, 0.0]]
    median = GeometricMedian(max_iterations=100, tolerance=0.0, weighting="samples")
    # α = 3 > 1 + 1: the minimizer of Σ α_i ‖v − x_i‖ is the first point itself.
    assert_close(aggregate(median, rows, [3.0, 1.0, 1.0]), rows[0], tol=1e-4)


def test_geometric_median_barely_moves_for_a_huge_outlier() -> None:
    generator = torch.Generator().manual_seed(0)
    honest = torch.randn(9, D, generator=generator).tolist()
    without = aggregate(GeometricMedian(), honest)
    with_outlier = aggregate(GeometricMedian(), [*honest, [1e4] * D])
    mean_shift = (torch.tensor([1e4] * D) - torch.tensor(honest).mean(0)).norm() / 10
    assert (with_outlier - without).norm() < 1e-3 * mean_shift  # the mean moves by ~2,200


def test_norm_clip_scales_long_updates_to_max_norm() -> None:
    rows = [[3.0, 0.0, 0.0, 0.0, 4.0], [0.1, 0.2, 0.0, 0.0, 0.2], [0.0, 0.0, 0.0, 10.0, 0.0]]
    weights = [1.0, 2.0, 1.0]
    # Norms 5, 0.3 and 10 against M = 2: scales 0.4, 1 and 0.2.
    clipped = [[0.4 * x for x in rows[0]], rows[1], [0.2 * x for x in rows[2]]]
    expected = [
        sum(w * row[j] for w, row in zip(weights, clipped, strict=True)) / 4 for j in range(D)
    ]
    assert_close(aggregate(NormClip(max_norm=2.0), rows, weights), expected)


def test_norm_clip_partials_merge_to_one_accumulator_and_reject_renormalizes() -> None:
    generator = torch.Generator().manual_seed(1)
    updates = [as_update(torch.randn(D, generator=generator) * 3) for _ in range(6)]
    weights = [1.0, 2.0, 3.0, 1.0, 2.0, 4.0]
    clip = NormClip(max_norm=1.5)
    single = clip.accumulator(sum(weights), 6)
    halves = [clip.accumulator(sum(weights), 6), clip.accumulator(sum(weights), 6)]
    for i, (update, weight) in enumerate(zip(updates, weights, strict=True)):
        single.add(update, weight)
        halves[i % 2].add(update, weight)
    merged = clip.accumulator(sum(weights), 6)
    merged.merge([halves[0].partial(), halves[1].partial()])
    for name, total in single.result().items():
        assert torch.allclose(merged.result()[name], total, atol=1e-6)

    # The last client rejected: the mean of the first five, clipped.
    partial = clip.accumulator(sum(weights), 6)
    for update, weight in zip(updates[:5], weights[:5], strict=True):
        partial.add(update, weight)
    partial.reject(weights[5])
    alone = clip.accumulator(sum(weights[:5]), 5)
    for update, weight in zip(updates[:5], weights[:5], strict=True):
        alone.add(update, weight)
    for name, total in alone.result().items():
        assert torch.allclose(partial.result()[name], total, atol=1e-6)


@pytest.mark.parametrize(
    ("aggregator", "clients_per_round", "message"),
    [
        (Krum(f=4), 9, "aggregator=krum needs n ≥ 2f + 3 = 11 updates (f=4), got 9"),
        (MultiKrum(f=2), 6, "aggregator=multi_krum needs n ≥ 2f + 3 = 7 updates (f=2), got 6"),
        (MultiKrum(f=1, m=8), 7, "aggregator=multi_krum needs m ≤ n updates (m=8), got 7"),
        (Bulyan(f=2), 10, "aggregator=bulyan needs n ≥ 4f + 3 = 11 updates (f=2), got 10"),
    ],
)
def test_too_few_clients_per_round_is_a_config_error(
    aggregator: Aggregator, clients_per_round: int, message: str
) -> None:
    with pytest.raises(ConfigError) as error:
        aggregator.check(clients_per_round)
    assert str(error.value) == f"fl.clients_per_round={clients_per_round}: {message}"
    aggregator.check(clients_per_round + 1 if "m ≤ n" in message else 11)


def test_a_round_with_too_few_updates_is_refused() -> None:
    accumulator = Bulyan(f=1).accumulator(7.0, 7)
    for row in TIED[:6]:  # one participant's update never came (rejected)
        accumulator.add(as_update(torch.tensor(row)), 1.0)
    with pytest.raises(RoundRefused, match=r"^aggregator=bulyan needs n ≥ 4f \+ 3 = 7 updates"):
        accumulator.result()


@pytest.mark.parametrize(
    ("build", "key"),
    [
        (lambda: TrimmedMean(beta=0.5), "aggregator.beta=0.5"),
        (lambda: TrimmedMean(beta=-0.1), "aggregator.beta=-0.1"),
        (lambda: Krum(f=-1), "aggregator.f=-1"),
        (lambda: Bulyan(f=1.5), "aggregator.f=1.5"),
        (lambda: MultiKrum(m=0), "aggregator.m=0"),
        (lambda: GeometricMedian(nu=0.0), "aggregator.nu=0.0"),
        (lambda: GeometricMedian(max_iterations=0), "aggregator.max_iterations=0"),
        (lambda: GeometricMedian(tolerance=-1.0), "aggregator.tolerance=-1.0"),
        (lambda: NormClip(max_norm=0.0), "aggregator.max_norm=0.0"),
        (
            lambda: Median(weighting="samples"),
            "aggregator.weighting=samples does not apply to aggregator=median",
        ),
    ],
)
def test_bad_settings_are_refused_naming_the_key(build: Callable[[], Aggregator], key: str) -> None:
    with pytest.raises(ConfigError, match="^" + key.replace(".", r"\.").replace("+", r"\+")):
        build()


def test_every_aggregator_has_its_yaml() -> None:
    assert AGGREGATOR_YAMLS == [
        "bulyan",
        "geometric_median",
        "krum",
        "mean",
        "median",
        "multi_krum",
        "norm_clip",
        "trimmed_mean",
    ]


# Seven clients' parameter deltas: a common direction plus noise, one far-off attacker.
UPLOAD_ROWS = [[0.5 + 0.01 * i, -0.3, 0.2 - 0.01 * i, 0.1, -0.4 + 0.02 * i] for i in range(6)]
UPLOAD_ROWS.append([40.0, 40.0, -40.0, 40.0, 40.0])
SAMPLES = [10, 20, 30, 40, 50, 60, 5]


@pytest.mark.parametrize("name", AGGREGATOR_YAMLS)
@pytest.mark.parametrize(
    "overrides",
    [["algo=fedavg"], ["algo=fedprox"], ["algo=fedavg", "server_opt=adam"]],
    ids=["fedavg", "fedprox", "fedavg-adam"],
)
def test_every_aggregator_moves_the_model_by_its_aggregate(
    make_job: Callable[[list[str]], Job], name: str, overrides: list[str]
) -> None:
    algorithm = make_job([f"aggregator={name}", *overrides]).algorithm
    assert isinstance(algorithm, FedAvg)
    aggregator = algorithm.aggregator
    assert type(aggregator).__module__ == f"fedlight.aggregation.{name}"
    federation = Federation(num_clients=10, trainable=frozenset(SHAPES))
    ctx = federation.round(1)
    weights = {"w": torch.ones(2, 2), "b": torch.zeros(1)}
    server = algorithm.init_server(weights, federation)
    uploads = [
        ClientUpload(i, samples, 3, as_update(torch.tensor(row)))
        for i, (row, samples) in enumerate(zip(UPLOAD_ROWS, SAMPLES, strict=True))
    ]
    moved = flatten(aggregate_uploads(algorithm, ctx, server, uploads).weights) - flatten(weights)

    weighting = aggregator.weighting_of(FedAvg.parts[UPDATE])
    client_weights = [client_weight(weighting, samples) for samples in SAMPLES]
    expected = aggregate(aggregator, UPLOAD_ROWS, client_weights)
    if "server_opt=adam" in overrides:  # Adam's first step: each coordinate by its sign
        assert torch.equal(moved.sign(), expected.sign())
    else:
        assert torch.allclose(moved, expected, atol=1e-6)
    if name not in ("mean", "trimmed_mean"):  # (trimmed_mean's k = floor(0.1 · 7) = 0)
        assert moved.abs().max() < 1.0  # the attacker (40 in every coordinate) is kept out


def test_norm_clip_runs_with_exchanged_sums_and_held_updates_do_not(
    make_job: Callable[[list[str]], Job],
) -> None:
    make_job(["aggregator=norm_clip", "fl.exchange=sums"])
    with pytest.raises(ConfigError, match=r"fl\.exchange=sums needs a linear aggregator"):
        make_job(["aggregator=krum", "fl.exchange=sums"])
