"""SCAFFOLD (Karimireddy et al., ICML 2020) through the real FederatedLoop: no client drift on a
heterogeneous quadratic, one round against a hand computation, bytes, and a bit-exact resume."""

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from torch import Tensor, nn

from fedlight.algorithms.base import Algorithm
from fedlight.algorithms.fedavg import FedAvg
from fedlight.algorithms.fednova import momentum_step_norm
from fedlight.algorithms.scaffold import CONTROL, DELTA_C, DELTA_Y, Scaffold
from fedlight.core.context import Federation, RoundContext
from fedlight.core.errors import ConfigError
from fedlight.core.messages import ClientUpload, LocalResult, ServerState
from fedlight.core.settings import FLSettings, LocalSettings, RunSettings
from fedlight.core.tensors import StateDict
from fedlight.data.base import TensorDataset
from fedlight.drivers.base import Clients
from fedlight.drivers.synchronous import FederatedLoop
from fedlight.lr_schedules.constant import Constant
from fedlight.round.stages import Stages
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from fedlight.stages.pool import ClientPool, ModelQuality
from fedlight.stages.selection.base import Population, Selection
from fedlight.stages.selection.random import RandomSelection
from fedlight.stages.wire.base import Wire
from fedlight.store.checkpoint import load_checkpoint
from tests.conftest import TINY, rows_without_timings, run_killed_in_round
from tests.helpers.algorithms import aggregate

F64 = torch.float64


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    """The CPU cores are shared: one intra-op thread avoids oversubscription (10× slower here)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class LeastSquares(pl.LightningModule):
    """f_i(w) = ½·mean_j (a_jᵀw − b_j)² over the client's rows, trained by plain SGD.

    The float64 buffer `seen` counts the samples a client has processed, so buffer aggregation is
    visible in the results.
    """

    def __init__(
        self, dim: int, lr: float, dtype: torch.dtype = F64, momentum: float = 0.0
    ) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(dim, dtype=dtype))
        self.register_buffer("seen", torch.zeros((), dtype=F64))
        self.lr = lr
        self.momentum = momentum

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        a, b = batch
        self.seen += len(b)
        return 0.5 * ((a.to(self.w.dtype) @ self.w - b.to(self.w.dtype)) ** 2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=self.momentum)


@dataclass
class FixedSelection(Selection):
    """The same clients every round, so a hand computation knows who trains."""

    clients: list[int]

    def select(self, ctx: RoundContext, clients_per_round: int, seen: Population) -> list[int]:
        return self.clients


@dataclass
class RecordingScaffold(Scaffold):
    """Scaffold that also keeps each upload, to compare Δy_i and Δc_i with the hand values."""

    uploads: list[ClientUpload] = field(default_factory=list)
    examples: list[int] = field(default_factory=list)  # each client's LocalResult.examples

    def upload(
        self,
        ctx: RoundContext,
        received: StateDict,
        local: LocalResult,
        client_state: StateDict | None,
    ) -> tuple[ClientUpload, StateDict | None]:
        upload, state = super().upload(ctx, received, local, client_state)
        self.uploads.append(upload)
        self.examples.append(local.examples)
        return upload, state


def least_squares_loop(
    algorithm: Algorithm,
    clients: list[tuple[Tensor, Tensor]],
    lr: float,
    local_steps: int,
    num_clients: int | None = None,
    selection: Selection | None = None,
    dtype: torch.dtype = F64,
    momentum: float = 0.0,
) -> FederatedLoop:
    """A FederatedLoop in which each client takes `local_steps` full-batch SGD steps (with
    `momentum`)."""
    num_clients = num_clients or len(clients)
    a = torch.cat([a for a, _ in clients])
    b = torch.cat([b for _, b in clients])
    sizes = [len(b) for _, b in clients]
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    indices = [torch.arange(s, s + n) for s, n in zip(starts, sizes, strict=True)]
    data = TensorDataset(a, b, a[:1], torch.zeros(1, dtype=torch.int64), num_classes=2)
    settings = RunSettings(
        fl=FLSettings(num_clients, len(clients), rounds=100),
        local=LocalSettings(epochs=local_steps, batch_size=max(sizes)),
        device="cpu",
    )
    module = LeastSquares(a.shape[1], lr, dtype, momentum)
    stages = Stages(algorithm, selection or RandomSelection(), Constant(), Wire())
    return FederatedLoop(settings, Clients(data, indices), module, stages)


# Two clients whose Hessians A_iᵀA_i/n differ: FedAvg's many local steps drift to a biased point.
# Equal sizes, so FedAvg's sample-weighted mean and SCAFFOLD's plain mean target the same w*.
DRIFT_CLIENTS = [
    (torch.tensor([[2.0, 0.0], [1.0, 1.0]], dtype=F64), torch.tensor([1.0, 3.0], dtype=F64)),
    (torch.tensor([[1.0, -1.0], [0.0, 2.0]], dtype=F64), torch.tensor([-2.0, 1.0], dtype=F64)),
]


def distances_to_optimum(algorithm: Algorithm, rounds: int) -> list[float]:
    """‖x_r − w*‖ after each round, w* the minimizer of (1/N) Σ_i f_i in closed form."""
    hessian = sum(a.T @ a / len(b) for a, b in DRIFT_CLIENTS)
    moment = sum(a.T @ b / len(b) for a, b in DRIFT_CLIENTS)
    optimum = torch.linalg.solve(hessian, moment)
    loop = least_squares_loop(algorithm, DRIFT_CLIENTS, lr=0.05, local_steps=50)
    distances = []
    for round_index in range(1, rounds + 1):
        loop.run_round(round_index)
        distances.append(float((loop.server.weights["w"] - optimum).norm()))
    return distances


def test_scaffold_removes_the_client_drift_that_biases_fedavg() -> None:
    """K=50 SGD steps per round: FedAvg settles far from w*, SCAFFOLD converges to it."""
    fedavg = distances_to_optimum(FedAvg(), rounds=15)
    scaffold = distances_to_optimum(Scaffold(), rounds=15)
    # FedAvg has converged (it no longer moves) to a point 0.72 away from w* = (0.5, 7/6).
    assert abs(fedavg[-1] - fedavg[-2]) < 1e-6
    assert fedavg[-1] > 0.5
    # SCAFFOLD: the same first round (c = c_i = 0), then linear convergence to w*.
    assert scaffold[0] == pytest.approx(fedavg[0], rel=1e-12)
    assert scaffold[-1] < 1e-4
    assert all(later < earlier for earlier, later in pairwise(scaffold))


# One round by hand: x, c and client 0's control c_0 are given; client 1 trains for the first time
# (c_1 = 0). Client 0 has 2 samples, client 1 one, so a sample-weighted mean would differ.
HAND_CLIENTS = [
    (torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=F64), torch.tensor([1.0, 2.0], dtype=F64)),
    (torch.tensor([[2.0, 1.0]], dtype=F64), torch.tensor([-1.0], dtype=F64)),
]
X = torch.tensor([0.5, -0.5], dtype=F64)
C = torch.tensor([0.5, -0.25], dtype=F64)
C0 = torch.tensor([0.25, 0.25], dtype=F64)
LR, K = 0.25, 2


def hand_local_training(client: int, c_i: Tensor) -> Tensor:
    """K plain SGD steps y ← y − η_l (∇f_i(y) − c_i + c), with ∇f_i(y) = Aᵀ(Ay − b)/n."""
    a, b = HAND_CLIENTS[client]
    y = X.clone()
    for _ in range(K):
        gradient = a.T @ (a @ y - b) / len(b)
        y = y - LR * (gradient - c_i + C)
    return y


def hand_round(
    num_clients: int, server_lr: float
) -> tuple[list[Tensor], list[Tensor], Tensor, Tensor]:
    """y_i, c_i⁺ (option II), x⁺ and c⁺ of Algorithm 1 for clients S = {0, 1} of N."""
    zero = torch.zeros(2, dtype=F64)
    y = [hand_local_training(0, C0), hand_local_training(1, zero)]
    c_new = [C0 - C + (X - y[0]) / (K * LR), zero - C + (X - y[1]) / (K * LR)]
    x_new = X + server_lr * ((y[0] - X) + (y[1] - X)) / 2
    c_plus = C + (2 / num_clients) * ((c_new[0] - C0) + (c_new[1] - zero)) / 2
    return y, c_new, x_new, c_plus


def run_hand_round(
    num_clients: int, server_lr: float, variant: str = "fedlight"
) -> tuple[RecordingScaffold, FederatedLoop]:
    """The same round through FederatedLoop.run_round, clients 2.. present but never sampled."""
    algorithm = RecordingScaffold(server_lr=server_lr, variant=variant)
    clients = HAND_CLIENTS + HAND_CLIENTS[:1] * (num_clients - 2)
    loop = least_squares_loop(
        algorithm, clients, LR, K, num_clients=num_clients, selection=FixedSelection([0, 1])
    )
    seen = torch.zeros((), dtype=F64)
    loop.server = ServerState({"w": X.clone(), "seen": seen}, {CONTROL + "w": C.clone()})
    loop.client_states.put(0, 0, {"w": C0.clone()})
    loop.run_round(1)
    return algorithm, loop


@pytest.mark.parametrize("variant", ["fedlight", "paper"])
@pytest.mark.parametrize(("num_clients", "server_lr"), [(2, 1.0), (4, 0.5)])
def test_one_round_matches_algorithm_1_by_hand(
    num_clients: int, server_lr: float, variant: str
) -> None:
    """Full participation (N = 2) and 2 of N = 4 sampled, where c moves by |S|/N = 1/2 only;
    without momentum fedlight's default and the paper's variant are the same rule."""
    algorithm, loop = run_hand_round(num_clients, server_lr, variant)
    y, c_new, x_new, c_plus = hand_round(num_clients, server_lr)

    for client, upload in enumerate(algorithm.uploads):
        assert torch.allclose(upload.tensors[DELTA_Y + "w"], y[client] - X, atol=1e-12)
        previous = C0 if client == 0 else torch.zeros(2, dtype=F64)
        assert torch.allclose(upload.tensors[DELTA_C + "w"], c_new[client] - previous, atol=1e-12)
        assert torch.allclose(loop.client_states[client]["w"], c_new[client], atol=1e-12)
    assert sorted(loop.client_states) == [0, 1]  # clients 2 and 3 never trained: no c_i stored
    assert torch.allclose(loop.server.weights["w"], x_new, atol=1e-12)
    assert torch.allclose(loop.server.extras[CONTROL + "w"], c_plus, atol=1e-12)
    # The buffer is FedAvg's sample-weighted mean, without η_g: client 0 saw 2·2 samples, client 1
    # saw 2·1, so (2·4 + 1·2)/3; the plain mean would be 3.
    assert loop.server.weights["seen"].item() == pytest.approx(10 / 3, abs=1e-12)
    # Nothing of the live module weights is kept in a client's state.
    live = {p.data_ptr() for p in loop.module.parameters()}
    assert all(s["w"].data_ptr() not in live for s in loop.client_states.values())


def test_one_round_literal_values_for_full_participation() -> None:
    """The N = 2, η_g = 1 round written out in numbers (η_l K = 1/2, so (x − y)/(Kη_l) = 2(x − y)).

    Client 0, ∇f_0(y) = ((y₁ − 1)/2, 2y₂ − 2), correction c − c_0 = (0.25, −0.5):
    y = (0.5, −0.5) → (0.5, 0.375) → (0.5, 0.8125).
    Client 1, ∇f_1(y) = (2r, r) with r = 2y₁ + y₂ + 1, correction c = (0.5, −0.25):
    y = (0.5, −0.5) → (−0.375, −0.8125) → (−0.21875, −0.609375).
    """
    _, loop = run_hand_round(num_clients=2, server_lr=1.0)
    y0 = torch.tensor([0.5, 0.8125], dtype=F64)
    y1 = torch.tensor([-0.21875, -0.609375], dtype=F64)
    c0_new = C0 - C + 2 * (X - y0)
    c1_new = -C + 2 * (X - y1)
    assert torch.equal(loop.client_states[0]["w"], c0_new)
    assert torch.equal(loop.client_states[1]["w"], c1_new)
    assert torch.equal(loop.server.weights["w"], (y0 + y1) / 2)
    assert torch.equal(loop.server.extras[CONTROL + "w"], C + ((c0_new - C0) + c1_new) / 2)


def test_simplified_control_update_differs_from_the_paper() -> None:
    """The seed tutorial's shortcut c_i⁺ = (x − y_i)/(Kη_l) and c ← c + mean Δc_i is not used.

    (x − y_i)/(Kη_l) is the average *corrected* gradient g_i − c_i + c; option II adds c_i − c to
    recover the average of g_i itself. And Σ_S Δc_i moves Σ_N c_i, so c stays the mean of all N
    client controls only with the |S|/N factor. With c, c_i ≠ 0 and |S| < N both terms matter.
    """
    _, loop = run_hand_round(num_clients=4, server_lr=1.0)
    y, _, _, c_plus = hand_round(num_clients=4, server_lr=1.0)
    zero = torch.zeros(2, dtype=F64)
    simplified_c_i = [(X - y_i) / (K * LR) for y_i in y]
    simplified = C + ((simplified_c_i[0] - C0) + (simplified_c_i[1] - zero)) / 2
    implemented = loop.server.extras[CONTROL + "w"]
    assert torch.allclose(implemented, c_plus, atol=1e-12)
    assert (simplified - implemented).abs().max() > 0.5


def test_server_control_stays_the_mean_of_all_client_controls() -> None:
    """Partial participation over rounds: c = (1/N) Σ_i c_i, clients never sampled counting 0."""
    loop = least_squares_loop(Scaffold(), DRIFT_CLIENTS * 3, lr=0.05, local_steps=5, num_clients=6)
    loop.settings.fl.clients_per_round = 2
    selected: set[int] = set()
    for round_index in range(1, 5):
        loop.run_round(round_index)
        selected = {c for c, rounds in enumerate(loop.history.participation) if rounds}
        assert set(loop.client_states) == selected
        total = sum(state["w"] for state in loop.client_states.values())
        assert torch.allclose(loop.server.extras[CONTROL + "w"], total / 6, atol=1e-12)
    assert len(selected) < 6  # some clients never trained, and hold no state


def test_a_client_that_took_no_step_stores_no_control_and_does_not_dilute_the_mean() -> None:
    """K = 0 (a client without data): option II is undefined, so c_i stays absent, Δc_i = 0, and x
    moves by client 0's Δy alone (a plain mean over both would halve it); c moves by (1/N)·Δc_0.

    Driven directly: the loop still takes one step on an empty batch today (see the report).
    """
    scaffold = Scaffold()
    x = {"w": X.clone(), "seen": torch.zeros((), dtype=F64)}
    ctx = Federation(num_clients=4, trainable=frozenset({"w"})).round(1)
    server = scaffold.init_server(x, ctx.federation)
    received = scaffold.download(ctx, server)
    y0 = {"w": torch.tensor([1.0, 2.0], dtype=F64), "seen": torch.tensor(4.0, dtype=F64)}
    trained = LocalResult(0, y0, num_samples=2, num_steps=K, lr=LR, train_loss=0.0)
    idle = LocalResult(1, {k: t.clone() for k, t in x.items()}, 0, 0, LR, 0.0)
    upload0, state0 = scaffold.upload(ctx, received, trained, None)
    upload1, state1 = scaffold.upload(ctx, received, idle, None)
    assert state1 is None and state0 is not None
    assert torch.equal(upload1.tensors[DELTA_C + "w"], torch.zeros(2, dtype=F64))
    new = aggregate(scaffold, ctx, server, [upload0, upload1])
    assert torch.equal(new.weights["w"], y0["w"])
    assert new.weights["seen"].item() == 4.0
    c_0 = (X - y0["w"]) / (K * LR)  # option II with c = c_0 = 0
    assert torch.allclose(state0["w"], c_0, atol=1e-15)
    assert torch.allclose(new.extras[CONTROL + "w"], c_0 / 4, atol=1e-15)
    assert aggregate(scaffold, ctx, server, [upload1]) is server  # nobody trained: nothing moves


def test_bytes_count_the_controls_both_ways() -> None:
    """Up: Δy (every state entry) + Δc (parameters); down: x + c. Here w is 3 float32 (12 B) and
    the buffer one float64 (8 B): 20 + 12 B per client each way, against FedAvg's 20."""
    generator = torch.Generator().manual_seed(0)
    clients = [(torch.randn(4, 3, generator=generator), torch.zeros(4)) for _ in range(3)]
    scaffold = least_squares_loop(Scaffold(), clients, 0.1, 2, dtype=torch.float32)
    fedavg = least_squares_loop(FedAvg(), clients, 0.1, 2, dtype=torch.float32)
    stats, baseline = scaffold.run_round(1), fedavg.run_round(1)
    assert (stats.bytes_up, stats.bytes_down) == (3 * (20 + 12), 3 * (20 + 12))
    assert (baseline.bytes_up, baseline.bytes_down) == (3 * 20, 3 * 20)


def test_server_lr_must_be_positive() -> None:
    with pytest.raises(ConfigError, match=r"algo\.server_lr"):
        Scaffold(server_lr=0.0)


def nothing_evaluated(weights: StateDict, indices: Tensor) -> ModelQuality:
    raise AssertionError("random selection asks no client anything")


def selected_up_to(rounds: int) -> set[int]:
    """Clients that trained in rounds 1..rounds of a TINY run (10 clients, 4 per round)."""
    return {
        c
        for r in range(1, rounds + 1)
        for c in RandomSelection().select(
            Federation(10, frozenset()).round(r),
            4,
            Population({}, ClientPool([], nothing_evaluated), {}),
        )
    }


def test_resume_after_a_kill_is_bit_exact_with_client_controls(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real config (algo=scaffold, momentum 0.9, non-IID) killed in round 4 and resumed from
    round 2's checkpoint gives the uninterrupted run's rows, weights and controls bit for bit."""
    overrides = [
        *TINY,
        "algo=scaffold",
        "partition=dirichlet",
        "optim.momentum=0.9",
        "fl.rounds=5",
        "checkpoint.every=2",
    ]
    job = make_job(overrides)
    assert isinstance(job.algorithm, Scaffold) and job.algorithm.server_lr == 1.0
    run_job(job, tmp_path / "full")

    run_killed_in_round(make_job(overrides), tmp_path / "killed", 4, monkeypatch)
    killed = load_checkpoint(tmp_path / "killed" / "checkpoint.pt")
    assert killed["completed_rounds"] == 2
    # Controls of exactly the clients that trained in rounds 1-2 are in the checkpoint.
    assert {int(c) for c in killed["client_states"]} == selected_up_to(2)
    assert len(killed["client_states"]) < 10
    assert any(t.abs().max() > 0 for t in killed["server_extras"].values())

    run_job(make_job([*overrides, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    rows = rows_without_timings(tmp_path / "full")
    assert rows_without_timings(tmp_path / "resumed") == rows and len(rows) == 5
    model_bytes = 4 * (64 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10)
    assert all(int(r["bytes_up"]) == int(r["bytes_down"]) == 4 * 2 * model_bytes for r in rows)
    assert float(rows[-1]["test_accuracy"]) > 0.5

    full = load_checkpoint(tmp_path / "full" / "checkpoint.pt")
    resumed = load_checkpoint(tmp_path / "resumed" / "checkpoint.pt")
    for key in ("server_weights", "server_extras"):
        assert full[key].keys() == resumed[key].keys()
        assert all(torch.equal(full[key][k], resumed[key][k]) for k in full[key])
    assert full["client_states"].keys() == resumed["client_states"].keys()
    assert {int(c) for c in full["client_states"]} == selected_up_to(5)
    for client, state in full["client_states"].items():
        assert all(torch.equal(state[k], resumed["client_states"][client][k]) for k in state)


def test_option_ii_recovers_the_gradient_under_local_momentum() -> None:
    """With a constant gradient g, K momentum-SGD steps move x by η g ‖a‖₁; option II must give
    c_i⁺ = g (here c = c_i = 0), not the ~1/(1 − ρ) times larger (x − y)/(K η)."""
    g = torch.tensor([0.3, -1.2])
    x = torch.tensor([1.0, 2.0])
    param = torch.nn.Parameter(x.clone())
    optimizer = torch.optim.SGD([param], lr=0.1, momentum=0.9)
    for _ in range(20):
        optimizer.zero_grad()
        param.grad = g.clone()
        optimizer.step()
    scaffold = Scaffold(momentum=0.9)
    ctx = Federation(num_clients=1, trainable=frozenset({"w"})).round(1)
    server = scaffold.init_server({"w": x}, ctx.federation)
    local = LocalResult(0, {"w": param.detach().clone()}, 5, 20, 0.1, 0.0)
    _, state = scaffold.upload(ctx, scaffold.download(ctx, server), local, None)
    assert torch.allclose(state["w"], g, atol=1e-5)
    without_momentum = Scaffold(momentum=0.0)
    server = without_momentum.init_server({"w": x}, ctx.federation)
    _, plain = without_momentum.upload(ctx, without_momentum.download(ctx, server), local, None)
    assert plain["w"].norm() > 5 * g.norm()


def hand_momentum_training(client: int, c_i: Tensor, rho: float, correction: str) -> Tensor:
    """K full-batch momentum-SGD steps (buffer b ← ρ b + g) with c − c_i added to the gradient
    (inside the momentum) or subtracted from the weights after each step (outside it)."""
    a, b = HAND_CLIENTS[client]
    y, buffer = X.clone(), torch.zeros_like(X)
    for step in range(K):
        gradient = a.T @ (a @ y - b) / len(b)
        if correction == "gradient":
            gradient = gradient + C - c_i
        buffer = gradient if step == 0 else rho * buffer + gradient
        y = y - LR * buffer
        if correction == "weights":
            y = y - LR * (C - c_i)
    return y


@pytest.mark.parametrize(
    ("correction", "control_norm"),
    [("weights", "steps"), ("weights", "momentum_steps"), ("gradient", "momentum_steps")],
)
def test_each_correction_and_control_normalization_matches_a_hand_round(
    correction: str, control_norm: str
) -> None:
    """Under local momentum 0.9: y_i by hand for the correction, and c_i⁺ = c_i − c +
    (x − y_i)/(s η_l) with s = K (steps) or FedNova's ‖a‖₁ (momentum_steps)."""
    rho = 0.9
    algorithm = RecordingScaffold(momentum=rho, correction=correction, control_norm=control_norm)
    loop = least_squares_loop(
        algorithm, HAND_CLIENTS, LR, K, selection=FixedSelection([0, 1]), momentum=rho
    )
    loop.server = ServerState(
        {"w": X.clone(), "seen": torch.zeros((), dtype=F64)}, {CONTROL + "w": C.clone()}
    )
    loop.client_states.put(0, 0, {"w": C0.clone()})
    loop.run_round(1)
    steps = K if control_norm == "steps" else momentum_step_norm(K, rho)
    for client, c_i in ((0, C0), (1, torch.zeros(2, dtype=F64))):
        y = hand_momentum_training(client, c_i, rho, correction)
        upload = algorithm.uploads[client].tensors
        assert torch.allclose(upload[DELTA_Y + "w"], y - X, atol=1e-12)
        c_new = c_i - C + (X - y) / (steps * LR)
        assert torch.allclose(loop.client_states[client]["w"], c_new, atol=1e-12)


def test_gradient_correction_with_step_normalization_under_momentum_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^algo.correction=gradient with algo.control_norm="):
        Scaffold(momentum=0.9, control_norm="steps")
    Scaffold(momentum=0.9, control_norm="steps", force=True)
    Scaffold(momentum=0.0, control_norm="steps")


def test_weight_correction_is_refused_by_the_vectorized_engine(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    overrides = [*TINY, "algo=scaffold", "algo.correction=weights", "fl.engine=vectorized"]
    with pytest.raises(ConfigError, match=r"^fl.engine=vectorized needs algorithm callbacks"):
        run_job(make_job(overrides), tmp_path)
