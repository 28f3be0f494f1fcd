"""Unequal local work (`local_work`, issue 66): the draws come from the (seed, round, client)
streams, a straggler's update is its partial training, FedAvg drops or keeps it, FedNova and
FedProx use the work actually done, and a fixed distribution changes nothing."""

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from torch import Tensor

from fedlight.algorithms.base import Algorithm
from fedlight.algorithms.fedavg import FedAvg
from fedlight.algorithms.fednova import FedNova
from fedlight.algorithms.fedprox import FedProx
from fedlight.core.context import Federation, RoundContext
from fedlight.core.errors import ConfigError
from fedlight.core.settings import FLSettings, LocalSettings, RunSettings
from fedlight.core.tensors import detached_copy
from fedlight.data.base import TensorDataset
from fedlight.data.digits import Digits
from fedlight.drivers.base import Clients
from fedlight.drivers.history import RoundStats
from fedlight.drivers.synchronous import FederatedLoop
from fedlight.engines.base import LocalTask
from fedlight.engines.sequential import SequentialEngine
from fedlight.engines.vectorized import VectorizedEngine
from fedlight.local_work.base import LocalWork
from fedlight.local_work.fixed import Fixed
from fedlight.local_work.stragglers import Stragglers
from fedlight.local_work.uniform import Uniform
from fedlight.lr_schedules.constant import Constant
from fedlight.round.stages import Stages
from fedlight.runs.experiment import resumed_checkpoint, run_job
from fedlight.runs.job import Job
from fedlight.stages.wire.base import Wire
from fedlight.store.checkpoint import load_checkpoint
from fedlight.store.run_files import CHECKPOINT_NAME
from tests.algorithms.test_scaffold import FixedSelection, LeastSquares
from tests.conftest import rows_without_timings, run_killed_in_round

F64 = torch.float64
LR, E = 0.1, 5
# Four least-squares clients of unequal sizes; a full batch each, so an epoch is one step.
CLIENTS = [
    (torch.tensor([[2.0, 0.0], [1.0, 1.0]], dtype=F64), torch.tensor([1.0, 3.0], dtype=F64)),
    (
        torch.tensor([[1.0, -1.0], [0.0, 2.0], [1.0, 0.5]], dtype=F64),
        torch.tensor([-2.0, 1.0, 0.5]),
    ),
    (torch.tensor([[0.5, 1.0]], dtype=F64), torch.tensor([2.0], dtype=F64)),
    (torch.tensor([[1.0, 1.0], [-1.0, 0.0]], dtype=F64), torch.tensor([0.0, 1.0], dtype=F64)),
]
X0 = torch.tensor([0.3, -0.2], dtype=F64)


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def loop_of(algorithm: Algorithm, work: LocalWork) -> FederatedLoop:
    """Every client every round, `E` full-batch epochs unless `work` says otherwise."""
    a = torch.cat([a for a, _ in CLIENTS])
    b = torch.cat([b.to(F64) for _, b in CLIENTS])
    sizes = [len(b) for _, b in CLIENTS]
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    indices = [torch.arange(s, s + n) for s, n in zip(starts, sizes, strict=True)]
    data = TensorDataset(a, b, a[:1], torch.zeros(1, dtype=torch.int64), num_classes=2)
    settings = RunSettings(
        fl=FLSettings(len(CLIENTS), len(CLIENTS), rounds=10),
        local=LocalSettings(epochs=E, batch_size=max(sizes)),
        device="cpu",
    )
    selection = FixedSelection(list(range(len(CLIENTS))))
    stages = Stages(algorithm, selection, Constant(), Wire(), local_work=work)
    loop = FederatedLoop(settings, Clients(data, indices), LeastSquares(2, LR), stages)
    loop.server.weights["w"] = X0.clone()
    return loop


def context(loop: FederatedLoop, round_index: int) -> RoundContext:
    return loop.federation.round(round_index, tuple(range(len(CLIENTS))), (LR,))


def trained_by_hand(client: int, steps: int, anchor: Tensor, mu: float = 0.0) -> Tensor:
    """`steps` full-batch SGD steps of ½·mean (aᵀw − b)² (+ μ/2 ‖w − anchor‖²) from `anchor`."""
    a, b = CLIENTS[client]
    w = anchor.clone()
    for _ in range(steps):
        w = w - LR * (a.T @ (a @ w - b.to(F64)) / len(b) + mu * (w - anchor))
    return w


def sample_mean(weights: dict[int, Tensor]) -> Tensor:
    sizes = {c: len(CLIENTS[c][1]) for c in weights}
    return sum(sizes[c] * w for c, w in weights.items()) / sum(sizes.values())


def test_stragglers_are_a_seeded_fraction_of_the_round_and_train_one_to_e_minus_1_epochs() -> None:
    work = Stragglers(full_epochs=E, fraction=0.5)
    federation = Federation(num_clients=100, trainable=frozenset(), seed=7)
    selected = tuple(range(0, 100, 10))
    rounds = [federation.round(r, selected, (LR,)) for r in range(1, 21)]
    for ctx in rounds:
        slow = work.slow(ctx)
        assert len(slow) == 5 and slow <= set(selected)
        assert slow == Stragglers(full_epochs=E, fraction=0.5, drop=True).slow(ctx)  # drop or not
        epochs = {c: work.epochs(ctx, c) for c in selected}
        assert all(1 <= epochs[c] <= E - 1 for c in slow)
        assert all(epochs[c] == E for c in set(selected) - slow)
        assert epochs == {c: work.epochs(ctx, c) for c in selected}  # the same draws again
    assert len({work.slow(ctx) for ctx in rounds}) > 1  # drawn anew each round
    drawn = {work.epochs(ctx, c) for ctx in rounds for c in work.slow(ctx)}
    assert drawn == set(range(1, E))
    assert len(Stragglers(full_epochs=E, fraction=0.9).slow(rounds[0])) == 9  # FedProx's 90%


def test_uniform_draws_each_clients_epochs_anew_every_round_from_low_to_high() -> None:
    work = Uniform(low=2, high=5)
    federation = Federation(num_clients=10, trainable=frozenset(), seed=3)
    draws = {
        (r, c): work.epochs(federation.round(r, (c,), (LR,)), c)
        for r in range(30)
        for c in range(10)
    }
    assert set(draws.values()) == {2, 3, 4, 5}
    again = Federation(num_clients=10, trainable=frozenset(), seed=3)
    assert all(work.epochs(again.round(r, (c,), (LR,)), c) == e for (r, c), e in draws.items())
    other = Federation(num_clients=10, trainable=frozenset(), seed=4)
    assert any(work.epochs(other.round(r, (c,), (LR,)), c) != e for (r, c), e in draws.items())
    assert work.most_epochs(1) == 5


@pytest.mark.parametrize("mu", [0.0, 0.5])
def test_a_stragglers_update_is_its_partial_training_kept_by_fedprox(mu: float) -> None:
    """FedProx keeps a straggler's partial work: the round's model is the sample-weighted mean of
    each client's own number of proximal SGD steps, computed by hand."""
    work = Stragglers(full_epochs=E, fraction=0.5)
    loop = loop_of(FedProx(mu=mu), work)
    ctx = context(loop, 1)
    epochs = {c: work.epochs(ctx, c) for c in range(len(CLIENTS))}
    assert sorted(epochs.values())[:2] != [E, E]  # two stragglers
    stats: RoundStats = loop.run_round(1)
    by_hand = sample_mean({c: trained_by_hand(c, e, X0, mu) for c, e in epochs.items()})
    assert torch.allclose(loop.server.weights["w"], by_hand, rtol=0, atol=1e-12)
    rows = {row["client"]: row for row in stats.clients}
    assert {c: (rows[c]["local_epochs"], rows[c]["local_steps"]) for c in epochs} == {
        c: (e, e) for c, e in epochs.items()
    }
    assert stats.metrics["slow_clients"] == 2 and stats.metrics["participants"] == 4
    assert stats.metrics["local_epochs_mean"] == sum(epochs.values()) / 4


def test_fedavg_drops_its_stragglers_or_keeps_their_partial_updates() -> None:
    dropping = Stragglers(full_epochs=E, fraction=0.5, drop=True)
    loop = loop_of(FedAvg(), dropping)
    slow = dropping.slow(context(loop, 1))
    stats = loop.run_round(1)
    kept = {c: trained_by_hand(c, E, X0) for c in range(len(CLIENTS)) if c not in slow}
    assert torch.allclose(loop.server.weights["w"], sample_mean(kept), rtol=0, atol=1e-12)
    assert {row["client"] for row in stats.clients} == set(kept)
    assert (stats.metrics["participants"], stats.metrics["slow_dropped"]) == (2, 2)
    keeping = Stragglers(full_epochs=E, fraction=0.5, drop=False)
    loop = loop_of(FedAvg(), keeping)
    ctx = context(loop, 1)
    assert keeping.slow(ctx) == slow  # the same stragglers, so the two compare the same round
    loop.run_round(1)
    partial = {c: trained_by_hand(c, keeping.epochs(ctx, c), X0) for c in range(len(CLIENTS))}
    assert torch.allclose(loop.server.weights["w"], sample_mean(partial), rtol=0, atol=1e-12)


def test_fednova_normalizes_by_the_steps_each_client_actually_took() -> None:
    """x + τ_eff Σ p_i Δ_i / τ_i with τ_i each client's drawn epochs (one full-batch step each)."""
    work = Uniform(low=1, high=6)
    loop = loop_of(FedNova(), work)
    ctx = context(loop, 1)
    steps = {c: work.epochs(ctx, c) for c in range(len(CLIENTS))}
    assert len(set(steps.values())) > 1
    loop.run_round(1)
    n = {c: len(CLIENTS[c][1]) for c in steps}
    p = {c: n[c] / sum(n.values()) for c in steps}
    normalized = sum(p[c] * (trained_by_hand(c, steps[c], X0) - X0) / steps[c] for c in steps)
    tau_eff = sum(p[c] * steps[c] for c in steps)
    assert torch.allclose(loop.server.weights["w"], X0 + tau_eff * normalized, rtol=0, atol=1e-12)


def test_a_fixed_amount_of_work_is_the_run_without_local_work() -> None:
    """`fixed` draws nothing and trains local.epochs; `uniform` from E to E trains the same steps
    on the same batches: the same numbers, bit for bit, and no column added."""
    fixed, drawn = loop_of(FedProx(mu=0.5), Fixed()), loop_of(FedProx(mu=0.5), Uniform(E, E))
    for round_index in (1, 2, 3):
        stats = fixed.run_round(round_index)
        drawn.run_round(round_index)
        assert "local_epochs_mean" not in stats.metrics
        assert torch.equal(fixed.server.weights["w"], drawn.server.weights["w"])
    assert Fixed().epochs(context(fixed, 1), 0) is None


@pytest.mark.parametrize(
    ("work", "message"),
    [
        (lambda: Stragglers(full_epochs=5, fraction=1.5), "local_work.fraction=1.5 must lie in"),
        (lambda: Stragglers(full_epochs=1, fraction=0.5), "use local.epochs >= 2"),
        (lambda: Uniform(low=3, high=2), "need 1 <= low <= high"),
        (lambda: Uniform(low=0, high=2), "need 1 <= low <= high"),
    ],
)
def test_bad_settings_are_one_line(work: Callable[[], LocalWork], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        work()


def test_combinations_that_cannot_count_the_work_are_refused(
    make_job: Callable[[list[str]], Job],
) -> None:
    tiny = ["data=digits", "model=mlp", "fl.num_clients=10", "fl.clients_per_round=4"]
    with pytest.raises(
        ConfigError, match=re.escape("privacy=dp_sgd accounts for at most local.epochs=1")
    ):
        make_job([*tiny, "privacy=dp_sgd", "local_work=uniform"])
    stragglers = ["local_work=stragglers", "local.epochs=2", "system=homogeneous"]
    with pytest.raises(
        ConfigError, match=re.escape("local_work=stragglers does not apply to algo=fedasync")
    ):
        make_job([*tiny, "algo=fedasync", *stragglers])
    assert make_job([*tiny, "privacy=dp_sgd", "local_work=stragglers", "local.epochs=2"])


def test_both_engines_train_each_tasks_own_epochs(make_job: Callable[[list[str]], Job]) -> None:
    """A task's epochs (a straggler's) set its steps and examples on either engine; the losses
    agree to float rounding."""
    job = make_job(["data=digits", "model=logistic", "local.batch_size=16", "local.epochs=4"])
    data = Digits().load()
    module = job.model(input_shape=data.input_shape, num_classes=data.num_classes)
    start = detached_copy(module.state_dict())
    clients = [torch.arange(0, 40), torch.arange(40, 100), torch.arange(100, 110)]
    tasks = [
        LocalTask(c, indices, start, [], epochs=e)
        for c, (indices, e) in enumerate(zip(clients, (None, 1, 3), strict=True))
    ]
    results = {
        engine.name: [
            (r.num_steps, r.examples, r.train_loss) for r in engine.train(tasks, 2, [0.05])
        ]
        for engine in (
            SequentialEngine(module, data, job.settings),
            VectorizedEngine(module, data, job.settings),
        )
    }
    sequential, vectorized = results["sequential"], results["vectorized"]
    assert [(s, x) for s, x, _ in sequential] == [(4 * 3, 4 * 40), (1 * 4, 60), (3 * 1, 3 * 10)]
    assert [(s, x) for s, x, _ in vectorized] == [(s, x) for s, x, _ in sequential]
    assert [v[2] for v in vectorized] == pytest.approx([s[2] for s in sequential], abs=1e-6)


def test_a_checkpoint_from_before_the_group_resumes_as_fixed_work(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run recorded before `local_work` existed (its config lacks the group) trained equal
    work: it resumes bit-exactly as `local_work=fixed`, and is another run under unequal work."""
    tiny = ["data=digits", "model=logistic", "fl.num_clients=10", "fl.clients_per_round=4"]
    old = [*tiny, "fl.rounds=3", "local.epochs=2", "checkpoint.every=1"]
    run_job(make_job(old), tmp_path / "full")
    run_killed_in_round(make_job(old), tmp_path / "killed", 3, monkeypatch)
    checkpoint = load_checkpoint(tmp_path / "killed" / CHECKPOINT_NAME)
    config = json.loads(checkpoint["config"])
    del config["local_work"]  # as fedlight wrote it before the group
    checkpoint["config"] = json.dumps(config)
    torch.save(checkpoint, tmp_path / "killed" / CHECKPOINT_NAME)
    resume = f"resume={tmp_path / 'killed'}"
    with pytest.raises(ConfigError, match=re.escape("config differs at local_work (checkpoint")):
        resumed_checkpoint(make_job([*old, "local_work=stragglers", resume]))
    run_job(make_job([*old, resume]), tmp_path / "resumed")
    assert rows_without_timings(tmp_path / "resumed") == rows_without_timings(tmp_path / "full")
