"""FedProx, FedNova and the server optimizers against FedAvg and hand computations."""

import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
import torch

from fedlight.algorithms.base import Algorithm
from fedlight.algorithms.fedadagrad import FedAdagrad
from fedlight.algorithms.fedadam import FedAdam
from fedlight.algorithms.fedavg import FedAvg
from fedlight.algorithms.fedavgm import FedAvgM
from fedlight.algorithms.fednova import FedNova
from fedlight.algorithms.fedprox import FedProx, ProximalTerm
from fedlight.algorithms.fedyogi import FedYogi
from fedlight.core.context import Federation, RoundContext
from fedlight.core.errors import ConfigError
from fedlight.core.messages import ClientUpload, LocalResult, ServerState
from fedlight.core.tensors import StateDict
from fedlight.models.mlp import MLP
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from fedlight.store.checkpoint import load_checkpoint
from tests.conftest import TINY, rows_without_timings, run_killed_in_round
from tests.helpers.algorithms import aggregate

NEW_ALGOS = ["fedprox", "fednova", "fedavgm", "fedadam", "fedyogi", "fedadagrad", "central"]


@pytest.fixture(autouse=True)
def one_torch_thread() -> Iterator[None]:
    """On a shared, busy CPU one thread is ~10× faster for these tiny models than two."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def final_weights(run_dir: Path) -> StateDict:
    return load_checkpoint(run_dir / "checkpoint.pt")["server_weights"]


def record_uploads(job: Job) -> list[list[ClientUpload]]:
    """Wraps the job's upload to keep each round's uploads (copied: they are live views)."""
    rounds: dict[int, list[ClientUpload]] = {}
    algorithm = job.algorithm
    original = algorithm.upload

    def recording(
        ctx: RoundContext, received: StateDict, local: LocalResult, state: StateDict | None
    ) -> tuple[ClientUpload, StateDict | None]:
        u, new_state = original(ctx, received, local, state)
        copy = {k: t.clone() for k, t in u.tensors.items()}
        rounds.setdefault(ctx.round_index, []).append(
            ClientUpload(u.client_id, u.num_samples, u.num_steps, copy)
        )
        return u, new_state

    algorithm.upload = recording  # type: ignore[method-assign]
    return RoundsView(rounds)


class RoundsView(list):
    """The recorded rounds' uploads in round order, read when the test looks."""

    def __init__(self, rounds: dict[int, list[ClientUpload]]) -> None:
        super().__init__()
        self.rounds = rounds

    def __getitem__(self, index):  # type: ignore[override]
        return [self.rounds[r] for r in sorted(self.rounds)][index]

    def __iter__(self):  # type: ignore[override]
        return iter([self.rounds[r] for r in sorted(self.rounds)])


def f64(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def uploads_of(deltas: Sequence[tuple[list[float], int, int]]) -> list[ClientUpload]:
    """Hand-built uploads: (delta of parameter "w", num_samples, num_steps); buffer "bn": +1."""
    return [
        ClientUpload(
            i,
            n,
            steps,
            {"w": f64(d), "bn": f64([1.0])},
        )
        for i, (d, n, steps) in enumerate(deltas)
    ]


def local_result(start: StateDict, upload: ClientUpload) -> LocalResult:
    """The local training that moved `start` by the upload's tensors."""
    weights = {name: t + upload.tensors[name] for name, t in start.items()}
    return LocalResult(upload.client_id, weights, upload.num_samples, upload.num_steps, 0.1, 0.0)


FEDERATION = Federation(num_clients=10, trainable=frozenset({"w"}))
CTX = FEDERATION.round(1)


def start(algorithm: Algorithm, w: list[float]) -> ServerState:
    weights = {"w": f64(w), "bn": f64([0.5])}
    return algorithm.init_server(weights, FEDERATION)


# FedProx ------------------------------------------------------------------------------------------


def test_fedprox_with_mu_zero_is_fedavg_bit_exactly_and_mu_shrinks_local_updates(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    norms: dict[str, float] = {}
    for name, overrides in {
        "fedavg": ["algo=fedavg"],
        "prox0": ["algo=fedprox", "algo.mu=0"],
        "prox1": ["algo=fedprox", "algo.mu=1.0"],
    }.items():
        job = make_job([*TINY, "fl.rounds=3", *overrides])
        uploads = record_uploads(job)
        run_job(job, tmp_path / name)
        # Round 1 starts every method from the same model with the same batches.
        norms[name] = sum(
            sum(t.square().sum().item() for t in u.tensors.values()) for u in uploads[0]
        )

    fedavg, prox0, prox1 = (tmp_path / n for n in ("fedavg", "prox0", "prox1"))
    assert rows_without_timings(prox0) == rows_without_timings(fedavg)
    avg_w, prox0_w = final_weights(fedavg), final_weights(prox0)
    assert avg_w.keys() == prox0_w.keys()
    assert all(torch.equal(avg_w[k], prox0_w[k]) for k in avg_w)

    assert rows_without_timings(prox1) != rows_without_timings(fedavg)
    assert not all(torch.equal(avg_w[k], final_weights(prox1)[k]) for k in avg_w)
    assert norms["prox0"] == norms["fedavg"]
    assert norms["prox1"] < 0.99 * norms["fedavg"]  # the proximal pull keeps clients closer to x


def test_proximal_callback_adds_mu_times_distance_to_global_weights() -> None:
    torch.manual_seed(0)
    module = MLP(input_shape=(3,), num_classes=2, lr=0.1)
    global_weights = {k: t.detach().clone() for k, t in module.state_dict().items()}
    fedprox = FedProx(mu=0.3)
    trainable = frozenset(name for name, _ in module.named_parameters())
    federation = Federation(num_clients=2, trainable=trainable)
    server = fedprox.init_server(global_weights, federation)
    with torch.no_grad():  # move the local model away from x, as local steps would
        for p in module.parameters():
            p.add_(torch.randn_like(p))
    loss = module.training_step((torch.randn(4, 3), torch.tensor([0, 1, 1, 0])), 0)
    loss.backward()
    plain = {n: p.grad.clone() for n, p in module.named_parameters()}

    [callback] = fedprox.local_callbacks(federation.round(1), server.weights, None)
    callback.on_after_backward(module)
    for name, p in module.named_parameters():
        expected = plain[name] + 0.3 * (p.detach() - global_weights[name])
        assert torch.allclose(p.grad, expected, rtol=0, atol=1e-6)
        assert not torch.allclose(p.grad, plain[name])
    assert isinstance(callback, ProximalTerm)


def test_fedprox_rejects_negative_mu() -> None:
    with pytest.raises(ConfigError, match=r"^algo\.mu=-0\.1 must be >= 0"):
        FedProx(mu=-0.1)


# FedNova -----------------------------------------------------------------------------------------


def test_fednova_with_equal_step_counts_is_fedavg(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    # 1438 digits over 10 iid clients: 143 or 144 samples, 5 steps of 32 each.
    overrides = [*TINY, "fl.rounds=2"]
    run_job(make_job([*overrides, "algo=fedavg"]), tmp_path / "fedavg")
    job = make_job([*overrides, "algo=fednova"])
    uploads = record_uploads(job)
    run_job(job, tmp_path / "fednova")

    assert {u.num_steps for r in uploads for u in r} == {5}
    assert len({u.num_samples for r in uploads for u in r}) == 2  # unequal p_i still agree
    avg_w, nova_w = final_weights(tmp_path / "fedavg"), final_weights(tmp_path / "fednova")
    for name in avg_w:
        assert torch.allclose(avg_w[name], nova_w[name], rtol=1e-5, atol=1e-6)
    for avg_row, nova_row in zip(
        rows_without_timings(tmp_path / "fedavg"),
        rows_without_timings(tmp_path / "fednova"),
        strict=True,
    ):
        assert float(nova_row["test_loss"]) == pytest.approx(float(avg_row["test_loss"]), 1e-5)


def test_fednova_normalizes_each_delta_by_its_steps() -> None:
    fednova = FedNova(server_lr=0.5)
    server = start(fednova, [1.0, 2.0])
    # client A: n=10, τ=2;  client B: n=30, τ=6
    uploads = uploads_of([([4.0, -2.0], 10, 2), ([12.0, 6.0], 30, 6)])
    # the client sends d_i = Δ_i/τ_i = (2, -1) and (2, 1); the buffer's delta as it is
    sent = [
        fednova.upload(CTX, server.weights, local_result(server.weights, upload), None)[0]
        for upload in uploads
    ]
    assert [u.tensors["w"].tolist() for u in sent] == [[2.0, -1.0], [2.0, 1.0]]
    assert all(u.tensors["bn"].tolist() == [1.0] for u in sent)
    new = aggregate(fednova, CTX, server, sent)
    # p = (1/4, 3/4);  Σ p d = (2, 1/2);  τ_eff = 2/4 + 18/4 = 5;  x + 0.5 · 5 · (2, 1/2)
    assert new.weights["w"].tolist() == pytest.approx([1.0 + 5.0, 2.0 + 1.25])
    # FedAvg would give x + 0.5 · (1/4 Δ_A + 3/4 Δ_B) = (1 + 5, 2 + 2): the 6-step client dominates
    fedavg = FedAvg(server_lr=0.5)
    assert aggregate(fedavg, CTX, start(fedavg, [1.0, 2.0]), uploads).weights["w"].tolist() == (
        pytest.approx([6.0, 4.0])
    )
    assert new.weights["bn"].tolist() == pytest.approx([0.5 + 1.0])  # buffers: the plain mean


def test_fednova_momentum_normalizer_matches_torch_sgd() -> None:
    """With a constant unit gradient, momentum SGD moves by exactly lr · ‖a‖₁ in τ steps."""
    rho, lr, tau = 0.9, 0.1, 7
    param = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.SGD([param], lr=lr, momentum=rho)
    for _ in range(tau):
        optimizer.zero_grad()
        param.sum().backward()
        optimizer.step()
    moved = -param.item() / lr
    assert FedNova(momentum=rho).step_norm(tau) == pytest.approx(moved, rel=1e-12)
    # [τ − ρ(1 − ρ^τ)/(1 − ρ)] / (1 − ρ) by hand
    assert moved == pytest.approx((7 - 0.9 * (1 - 0.9**7) / 0.1) / 0.1, rel=1e-12)
    assert FedNova().step_norm(tau) == 7.0


def test_fednova_momentum_comes_from_optim_momentum(make_job: Callable[[list[str]], Job]) -> None:
    assert make_job([*TINY, "algo=fednova", "optim.momentum=0.9"]).algorithm.momentum == 0.9


# Server optimizers ----------------------------------------------------------------------------

ROUND_1 = [([1.1, -0.25], 1, 3), ([0.3, 0.15], 3, 3)]  # mean Δ_1 = (0.5, 0.05)
ROUND_2 = [([-0.2, 0.4], 1, 3), ([0.0, -0.2], 3, 3)]  # mean Δ_2 = (-0.05, -0.05)
X0 = [1.0, -2.0]


def two_rounds(algorithm: Algorithm) -> tuple[ServerState, ServerState]:
    first = aggregate(algorithm, CTX, start(algorithm, X0), uploads_of(ROUND_1))
    return first, aggregate(algorithm, CTX, first, uploads_of(ROUND_2))


def test_fedavgm_two_rounds_by_hand() -> None:
    first, second = two_rounds(FedAvgM(server_lr=0.5, server_momentum=0.9))
    # m1 = Δ1 = (0.5, 0.05); x1 = x0 + 0.5 m1
    assert first.weights["w"].tolist() == pytest.approx([1.0 + 0.25, -2.0 + 0.025])
    # m2 = 0.9 m1 + Δ2 = (0.45 − 0.05, 0.045 − 0.05) = (0.4, −0.005); x2 = x1 + 0.5 m2
    assert second.extras["m/w"].tolist() == pytest.approx([0.4, -0.005])
    assert second.weights["w"].tolist() == pytest.approx([1.25 + 0.2, -1.975 - 0.0025])
    assert second.weights["bn"].tolist() == pytest.approx([2.5])  # 0.5 + 1 + 1, no momentum


def adaptive_by_hand(v_rule: Callable[[float, float], float]) -> list[list[float]]:
    """x after rounds 1 and 2 for η = 0.1, β1 = 0.9, τ = 0.1, one coordinate at a time."""
    eta, beta1, tau = 0.1, 0.9, 0.1
    out = [[], []]
    for i in range(2):
        x, m, v = X0[i], 0.0, tau**2
        for delta in ((0.5, 0.05)[i], -0.05):
            m = beta1 * m + (1 - beta1) * delta
            v = v_rule(v, delta**2)
            x = x + eta * m / (math.sqrt(v) + tau)
            out[i].append(x)
    return [[out[0][0], out[1][0]], [out[0][1], out[1][1]]]


@pytest.mark.parametrize(
    ("algorithm", "v_rule", "v_after_two"),
    [
        (
            FedAdam(server_lr=0.1, beta1=0.9, beta2=0.99, tau=0.1),
            lambda v, d2: 0.99 * v + 0.01 * d2,
            # 0.99 (0.99 · 0.01 + 0.01 · 0.25) + 0.01 · 0.0025; same with 0.0025 in round 1
            [0.99 * (0.0099 + 0.0025) + 0.000025, 0.99 * (0.0099 + 0.000025) + 0.000025],
        ),
        (
            FedYogi(server_lr=0.1, beta1=0.9, beta2=0.99, tau=0.1),
            lambda v, d2: v - 0.01 * d2 * math.copysign(1.0, v - d2) if v != d2 else v,
            # coordinate 0: Δ² = 0.25 > v0 = 0.01, v grows by 0.0025; then 0.0025 < v, v shrinks
            # coordinate 1: Δ² = 0.0025 < v0 both rounds, v shrinks by 0.000025 twice
            [0.01 + 0.0025 - 0.000025, 0.01 - 0.000025 - 0.000025],
        ),
        (
            FedAdagrad(server_lr=0.1, beta1=0.9, tau=0.1),
            lambda v, d2: v + d2,
            [0.01 + 0.25 + 0.0025, 0.01 + 0.0025 + 0.0025],
        ),
    ],
    ids=["fedadam", "fedyogi", "fedadagrad"],
)
def test_adaptive_server_optimizers_two_rounds_by_hand(
    algorithm: Algorithm, v_rule: Callable[[float, float], float], v_after_two: list[float]
) -> None:
    first, second = two_rounds(algorithm)
    expected_first, expected_second = adaptive_by_hand(v_rule)
    assert first.weights["w"].tolist() == pytest.approx(expected_first, rel=1e-12)
    assert second.weights["w"].tolist() == pytest.approx(expected_second, rel=1e-12)
    assert second.extras["v/w"].tolist() == pytest.approx(v_after_two, rel=1e-12)
    # m2 = 0.9 (0.1 Δ1) + 0.1 Δ2
    assert second.extras["m/w"].tolist() == pytest.approx([0.045 - 0.005, 0.0045 - 0.005])
    assert second.weights["bn"].tolist() == pytest.approx([2.5])  # buffers: plain mean delta
    # Round 1 by hand for FedAdam's first coordinate: m = 0.05, v = 0.0124, x = 1 + 0.1 m/(√v + τ)
    if isinstance(algorithm, FedAdam):
        assert first.weights["w"][0].item() == pytest.approx(
            1.0 + 0.1 * 0.05 / (math.sqrt(0.0124) + 0.1), rel=1e-12
        )


def test_server_optimizer_state_starts_at_paper_values() -> None:
    server = start(FedAdam(tau=1e-3), X0)
    assert set(server.extras) == {"m/w", "v/w"}  # buffers have no optimizer state
    assert server.extras["m/w"].tolist() == [0.0, 0.0]
    assert server.extras["v/w"].tolist() == pytest.approx([1e-6, 1e-6])


@pytest.mark.parametrize(
    ("make", "key"),
    [
        (lambda: FedAdam(beta1=1.0), "beta1"),
        (lambda: FedYogi(beta2=-0.1), "beta2"),
        (lambda: FedAdagrad(tau=0.0), "tau"),
        (lambda: FedAvgM(server_momentum=1.0), "server_momentum"),
        (lambda: FedNova(momentum=1.0), "momentum"),
        (lambda: FedAdam(server_lr=0.0), "server_lr"),
    ],
)
def test_bad_hyperparameters_name_their_key(make: Callable[[], Algorithm], key: str) -> None:
    with pytest.raises(ConfigError, match=rf"^algo\.{key}="):
        make()


def test_fedadam_resume_after_a_kill_is_bit_exact(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The moments travel in the checkpoint: a resumed run continues the same trajectory."""
    overrides = [*TINY, "algo=fedadam", "fl.rounds=3", "checkpoint.every=2"]
    run_job(make_job(overrides), tmp_path / "full")
    run_killed_in_round(make_job(overrides), tmp_path / "killed", 3, monkeypatch)
    extras = load_checkpoint(tmp_path / "killed" / "checkpoint.pt")["server_extras"]
    assert any(k.startswith("v/") for k in extras)

    run_job(make_job([*overrides, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    assert rows_without_timings(tmp_path / "resumed") == rows_without_timings(tmp_path / "full")
    full, resumed = final_weights(tmp_path / "full"), final_weights(tmp_path / "resumed")
    assert all(torch.equal(full[k], resumed[k]) for k in full)


# Every option composes and runs -----------------------------------------------------------------


@pytest.mark.parametrize("algo", NEW_ALGOS)
def test_every_algorithm_option_runs_a_round(
    make_job: Callable[[list[str]], Job], tmp_path: Path, algo: str
) -> None:
    job = make_job([*TINY, f"algo={algo}", "fl.rounds=1"])
    assert job.choices["algo"] == algo
    summary = run_job(job, tmp_path / algo)
    assert summary["algo"] == algo and summary["rounds"] == 1
    [row] = rows_without_timings(tmp_path / algo)
    assert 0 < float(row["test_accuracy"]) <= 1 and math.isfinite(float(row["test_loss"]))
    weights = final_weights(tmp_path / algo)
    assert all(torch.isfinite(t.float()).all() for t in weights.values())
