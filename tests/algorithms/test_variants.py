"""Reference variants (issue 18): each `variant` sets the switches it says, an explicit switch
wins, and each variant's round matches hand arithmetic (SCAFFOLD's NIID-Bench and Flower rules,
option I, FedProx's paper server with sampling ∝ n_k)."""

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import Tensor

from fedlight.algorithms.fedprox import FedProx
from fedlight.algorithms.scaffold import CONTROL, DELTA_C, DELTA_Y, Scaffold
from fedlight.core.context import Federation
from fedlight.core.errors import ConfigError
from fedlight.core.messages import ServerState
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from fedlight.server_opt.adam import Adam
from fedlight.stages.pool import ClientPool, ModelQuality
from fedlight.stages.selection.base import Population
from fedlight.stages.selection.proportional import Proportional
from tests.algorithms.test_scaffold import (
    C0,
    F64,
    HAND_CLIENTS,
    LR,
    C,
    FixedSelection,
    K,
    RecordingScaffold,
    X,
    hand_local_training,
    hand_momentum_training,
    least_squares_loop,
)
from tests.conftest import TINY

SCAFFOLD_SWITCHES = (
    "correction",
    "control_norm",
    "control_update",
    "update_weighting",
    "control_weighting",
    "control_init",
)


@pytest.mark.parametrize(
    ("variant", "expected"),
    [
        ("fedlight", ("gradient", "momentum_steps", "option2", "uniform", "uniform", "zero")),
        ("paper", ("gradient", "steps", "option2", "uniform", "uniform", "zero")),
        ("niid_bench", ("weights", "steps", "option2", "samples", "uniform", "zero")),
        ("flower", ("weights", "steps", "option2", "samples", "samples", "model")),
        ("tutorial", ("gradient", "steps", "tutorial", "uniform", "uniform", "zero")),
    ],
)
def test_each_scaffold_variant_sets_what_it_says(
    variant: str, expected: tuple[str, ...], make_job: Callable[[list[str]], Job]
) -> None:
    """Through the config as a user writes it (momentum 0: the paper's variant is allowed)."""
    job = make_job([*TINY, "algo=scaffold", f"algo.variant={variant}"])
    algorithm = job.stages.algorithm
    assert tuple(getattr(algorithm, switch) for switch in SCAFFOLD_SWITCHES) == expected
    weightings = {name: part.weighting for name, part in algorithm.parts.items()}
    assert (weightings[DELTA_Y], weightings[DELTA_C]) == expected[3:5]


def test_an_explicit_switch_wins_over_the_variant(make_job: Callable[[list[str]], Job]) -> None:
    overrides = ["algo=scaffold", "algo.variant=niid_bench", "algo.control_norm=momentum_steps"]
    algorithm = make_job([*TINY, *overrides]).stages.algorithm
    assert (algorithm.correction, algorithm.control_norm) == ("weights", "momentum_steps")


def test_an_unknown_variant_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^algo.variant=nvflare is not a variant of Scaffold"):
        Scaffold(variant="nvflare")


def run_variant_round(algorithm: Scaffold, num_clients: int, momentum: float) -> Scaffold:
    """One round of clients {0, 1} of `num_clients` from x = X, c = C, c_0 = C0 (client 1 new)."""
    clients = HAND_CLIENTS + HAND_CLIENTS[:1] * (num_clients - 2)
    loop = least_squares_loop(
        algorithm,
        clients,
        LR,
        K,
        num_clients=num_clients,
        selection=FixedSelection([0, 1]),
        momentum=momentum,
    )
    loop.server = ServerState(
        {"w": X.clone(), "seen": torch.zeros((), dtype=F64)}, {CONTROL + "w": C.clone()}
    )
    loop.client_states.put(0, 0, {"w": C0.clone()})
    loop.run_round(1)
    algorithm.loop = loop  # type: ignore[attr-defined]
    return algorithm


def test_the_tutorial_variant_is_the_tutorials_code_by_hand() -> None:
    """The SCAFFOLD tutorial's §2.1–2.2 as written, 2 of N = 4 sampled, plain SGD: its c_i is never
    stored (0 in every step: y ← y − η (g − 0 + c)), Δc_i = (x − y_i)/(K η) without the paper's
    −c, x⁺ = x + mean Δy and c⁺ = c + mean Δc_i without the paper's |S|/N."""
    algorithm = RecordingScaffold(variant="tutorial")
    loop = least_squares_loop(
        algorithm, HAND_CLIENTS * 2, LR, K, num_clients=4, selection=FixedSelection([0, 1])
    )
    loop.server = ServerState(
        {"w": X.clone(), "seen": torch.zeros((), dtype=F64)}, {CONTROL + "w": C.clone()}
    )
    loop.run_round(1)
    y = [hand_local_training(i, torch.zeros(2, dtype=F64)) for i in (0, 1)]
    delta_c = [(X - y[i]) / (K * LR) for i in (0, 1)]
    for i in (0, 1):
        assert torch.allclose(algorithm.uploads[i].tensors[DELTA_C + "w"], delta_c[i], atol=1e-12)
    assert torch.allclose(loop.server.weights["w"], X + (y[0] + y[1] - 2 * X) / 2, atol=1e-12)
    c_new = loop.server.extras[CONTROL + "w"]
    assert torch.allclose(c_new, C + (delta_c[0] + delta_c[1]) / 2, atol=1e-12)
    assert 0 not in loop.client_states and 1 not in loop.client_states


@pytest.mark.parametrize("variant", ["niid_bench", "flower"])
def test_niid_bench_and_flower_rounds_match_hand_arithmetic(variant: str) -> None:
    """Momentum 0.9, 2 of N = 4 sampled, client 0 holds 2 samples and client 1 one: p −= η(c − c_i)
    after each step, c_i⁺ = c_i − c + (x − y_i)/(K η), x⁺ = x + Σ n_i Δy_i / Σ n_i; NIID-Bench
    c⁺ = c + (1/N) Σ Δc_i, Flower c⁺ = c + (|S|/N) Σ n_i Δc_i / Σ n_i and a new client's c_i = x."""
    rho, n = 0.9, 4
    algorithm = run_variant_round(RecordingScaffold(momentum=rho, variant=variant), n, rho)
    loop = algorithm.loop  # type: ignore[attr-defined]
    first_control = X if variant == "flower" else torch.zeros(2, dtype=F64)
    controls = [C0, first_control]
    y = [hand_momentum_training(i, controls[i], rho, "weights") for i in (0, 1)]
    c_new = [controls[i] - C + (X - y[i]) / (K * LR) for i in (0, 1)]
    delta_c = [c_new[i] - controls[i] for i in (0, 1)]
    for i in (0, 1):
        upload = algorithm.uploads[i].tensors
        assert torch.allclose(upload[DELTA_Y + "w"], y[i] - X, atol=1e-12)
        assert torch.allclose(upload[DELTA_C + "w"], delta_c[i], atol=1e-12)
        assert torch.allclose(loop.client_states[i]["w"], c_new[i], atol=1e-12)
    x_new = X + (2 * (y[0] - X) + (y[1] - X)) / 3
    assert torch.allclose(loop.server.weights["w"], x_new, atol=1e-12)
    if variant == "niid_bench":
        c_plus = C + (delta_c[0] + delta_c[1]) / n
    else:
        c_plus = C + (2 / n) * (2 * delta_c[0] + delta_c[1]) / 3
    assert torch.allclose(loop.server.extras[CONTROL + "w"], c_plus, atol=1e-12)


def test_flower_starts_c_at_the_initial_model() -> None:
    x0 = {"w": torch.tensor([1.0, -2.0]), "b": torch.tensor([3.0])}
    server = Scaffold(variant="flower").init_server(x0, Federation(2, frozenset({"w"})))
    assert torch.equal(server.extras[CONTROL + "w"], x0["w"]) and CONTROL + "b" not in server.extras
    zero = Scaffold(variant="niid_bench").init_server(x0, Federation(2, frozenset({"w"})))
    assert torch.equal(zero.extras[CONTROL + "w"], torch.zeros(2))


def test_option1_sets_the_control_to_the_full_local_gradient_at_x() -> None:
    """c_i⁺ = ∇f_i(x) = Aᵀ(Ax − b)/n over all the client's rows; training and buffers as under
    option II (the extra pass leaves the `seen` counter alone)."""
    option1 = run_variant_round(RecordingScaffold(control_update="option1"), 2, 0.0)
    option2 = run_variant_round(RecordingScaffold(), 2, 0.0)
    loop1, loop2 = option1.loop, option2.loop  # type: ignore[attr-defined]
    for i, previous in ((0, C0), (1, torch.zeros(2, dtype=F64))):
        a, b = HAND_CLIENTS[i]
        gradient = a.T @ (a @ X - b) / len(b)
        y = hand_local_training(i, previous)
        assert torch.allclose(option1.uploads[i].tensors[DELTA_Y + "w"], y - X, atol=1e-12)
        assert torch.allclose(loop1.client_states[i]["w"], gradient, atol=1e-12)
        assert torch.allclose(option1.uploads[i].tensors[DELTA_C + "w"], gradient - previous)
    assert torch.equal(loop1.server.weights["w"], loop2.server.weights["w"])
    assert torch.equal(loop1.server.weights["seen"], loop2.server.weights["seen"])


def test_option1_extra_pass_counts_as_the_clients_work() -> None:
    """A system's clock charges the examples trained on: K full-batch steps plus the one pass."""
    examples: dict[str, list[int]] = {}
    for update in ("option1", "option2"):
        algorithm = RecordingScaffold(control_update=update)
        run_variant_round(algorithm, 2, 0.0)
        examples[update] = algorithm.examples
    sizes = [len(b) for _, b in HAND_CLIENTS]
    assert examples["option2"] == [K * n for n in sizes]
    assert examples["option1"] == [(K + 1) * n for n in sizes]


def test_option1_is_refused_by_the_vectorized_engine(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    overrides = [*TINY, "algo=scaffold", "algo.control_update=option1", "fl.engine=vectorized"]
    with pytest.raises(ConfigError, match=r"^fl.engine=vectorized needs algorithm callbacks"):
        run_job(make_job(overrides), tmp_path)


def test_fedprox_paper_takes_the_plain_mean() -> None:
    """μ = 0 isolates the server: x⁺ = x + (Δ_0 + Δ_1)/2 although client 0 holds twice the data;
    the default variant takes FedAvg's sample-weighted mean."""
    results = {}
    for variant in ("paper", "fedlight"):
        loop = least_squares_loop(
            FedProx(mu=0.0, variant=variant), HAND_CLIENTS, LR, K, selection=FixedSelection([0, 1])
        )
        loop.server = ServerState({"w": X.clone(), "seen": torch.zeros((), dtype=F64)})
        loop.run_round(1)
        results[variant] = loop.server.weights["w"]
    y = [hand_local_training(i, C) for i in (0, 1)]  # c − c_i = 0: plain SGD
    assert torch.allclose(results["paper"], X + ((y[0] - X) + (y[1] - X)) / 2, atol=1e-12)
    assert torch.allclose(results["fedlight"], X + (2 * (y[0] - X) + (y[1] - X)) / 3, atol=1e-12)


def test_fedprox_paper_needs_proportional_selection(make_job: Callable[[list[str]], Job]) -> None:
    overrides = [*TINY, "algo=fedprox", "algo.variant=paper"]
    with pytest.raises(ConfigError, match=r"^selection=random with algo.sampling=proportional"):
        make_job(overrides)
    algorithm = make_job([*overrides, "selection=proportional"]).stages.algorithm
    assert (algorithm.update_weighting, algorithm.sampling) == ("uniform", "proportional")


def test_proportional_selection_draws_by_data_size() -> None:
    """K = 1 of sizes (0, 10, 30, 60): never the empty client, shares near 0.1/0.3/0.6 over
    4,000 rounds (binomial std ≤ 0.008, tolerance 0.03); K = 3 takes all three with data."""
    sizes = [0, 10, 30, 60]
    indices = [torch.arange(n) for n in sizes]
    pool = ClientPool(indices, lambda w, i: ModelQuality(0.0, 0.0))
    seen = Population({}, pool, {})
    federation = Federation(len(sizes), frozenset())
    counts = Counter(
        client
        for r in range(1, 4001)
        for client in Proportional().select(federation.round(r), 1, seen)
    )
    assert counts[0] == 0
    for client, share in ((1, 0.1), (2, 0.3), (3, 0.6)):
        assert counts[client] / 4000 == pytest.approx(share, abs=0.03)
    assert Proportional().select(federation.round(1), 3, seen) == [1, 2, 3]
    assert Proportional().select(federation.round(1), 4, seen) == [1, 2, 3]


def hand_adam(deltas: list[Tensor], form: str) -> Tensor:
    """x after the server Adam updates of `deltas` from x = (1, −2), m = v = 0."""
    lr, beta1, beta2, tau = 0.1, 0.9, 0.99, 1e-3
    x = torch.tensor([1.0, -2.0], dtype=F64)
    m = v = torch.zeros(2, dtype=F64)
    for t, delta in enumerate(deltas, start=1):
        m = beta1 * m + (1 - beta1) * delta
        v = beta2 * v + (1 - beta2) * delta**2
        if form == "moments":
            x = x + lr * (m / (1 - beta1**t)) / ((v / (1 - beta2**t)).sqrt() + tau)
        elif form == "flower":  # η √(1 − β2^(t+1)) / (1 − β1^(t+1)) · m / (√v + τ)
            step = lr * (1 - beta2 ** (t + 1)) ** 0.5 / (1 - beta1 ** (t + 1))
            x = x + step * m / (v.sqrt() + tau)
        else:
            x = x + lr * m / (v.sqrt() + tau)
    return x


@pytest.mark.parametrize(
    ("settings", "form"),
    [
        ({"variant": "optax"}, "moments"),
        ({"variant": "flower"}, "flower"),
        ({"initial_v": "zero", "bias_correction": "none"}, "none"),  # Flower's older FedAdam
    ],
)
def test_server_adam_variants_match_hand_arithmetic_for_two_updates(
    settings: dict[str, str], form: str
) -> None:
    optimizer = Adam(lr=0.1, beta1=0.9, beta2=0.99, tau=1e-3, **settings)
    weights = {"w": torch.tensor([1.0, -2.0], dtype=F64)}
    extras = optimizer.init_state(weights, frozenset({"w"}))
    deltas = [torch.tensor([0.5, -0.1], dtype=F64), torch.tensor([-0.2, 0.3], dtype=F64)]
    for t in (1, 2):
        weights, extras = optimizer.step(weights, {"w": deltas[t - 1]}, extras)
        torch.testing.assert_close(weights["w"], hand_adam(deltas[:t], form), rtol=0, atol=1e-12)
    assert ("t/w" in extras) == (form != "none")


def test_server_adam_paper_variant_is_the_default() -> None:
    adam = Adam()
    assert (adam.initial_v, adam.bias_correction) == ("tau_squared", "none")


def test_flower_equals_niid_bench_with_sample_weighted_controls_under_full_participation() -> None:
    """Flower's c = x₀ and c_i = x cancel when every client trains in round 1: three rounds match
    NIID-Bench's rule with Δc sample-weighted (up to float rounding), though c differs by x₀
    nowhere after round 1."""
    finals = []
    for algorithm in (
        Scaffold(momentum=0.9, variant="flower"),
        Scaffold(momentum=0.9, variant="niid_bench", control_weighting="samples"),
    ):
        loop = least_squares_loop(algorithm, HAND_CLIENTS, LR, K, momentum=0.9)
        loop.server = algorithm.init_server(
            {"w": X.clone(), "seen": torch.zeros((), dtype=F64)}, loop.federation
        )
        for round_index in (1, 2, 3):
            loop.run_round(round_index)
        finals.append((loop.server.weights["w"], loop.server.extras[CONTROL + "w"]))
    (w_flower, c_flower), (w_niid, c_niid) = finals
    assert torch.allclose(w_flower, w_niid, atol=1e-12)
    assert torch.allclose(c_flower, c_niid, atol=1e-12)


def test_summary_records_the_switches_each_variant_ran_with(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """The YAML keeps the filled switches null, so summary.json says what ran."""
    overrides = [*TINY, "fl.rounds=1", "algo=scaffold", "algo.variant=niid_bench"]
    summary = run_job(
        make_job([*overrides, "server_opt=adam", "server_opt.variant=flower"]), tmp_path
    )
    assert summary["variants"]["algo"] == {
        "variant": "niid_bench",
        "correction": "weights",
        "control_norm": "steps",
        "control_update": "option2",
        "update_weighting": "samples",
        "control_weighting": "uniform",
        "control_init": "zero",
        "control_scaling": "participation",
    }
    assert summary["variants"]["server_opt"] == {
        "variant": "flower",
        "initial_v": "zero",
        "bias_correction": "flower",
    }
    fedavg = run_job(make_job([*TINY, "fl.rounds=1"]), tmp_path / "fedavg")
    assert "variants" not in fedavg
