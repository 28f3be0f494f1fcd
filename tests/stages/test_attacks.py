"""Attacking clients and the server's defences that do not depend on the aggregator: the seeded
set of malicious clients, each attack's arithmetic on the model update only, label flipping
through a label map on both engines, omniscient forgeries from the benign updates, the rejection
of NaN/Inf updates, refused rounds, refusals of nonsense settings, and resume under attack."""

import json
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from statistics import NormalDist

import pytest
import torch

from fedlight.aggregation.base import RoundAggregation
from fedlight.aggregation.mean import Mean, WeightedMean
from fedlight.algorithms.fedavg import BUFFERS, UPDATE, FedAvg
from fedlight.algorithms.scaffold import DELTA_C, DELTA_Y, Scaffold
from fedlight.core.context import Federation
from fedlight.core.errors import ConfigError
from fedlight.core.messages import ClientUpload
from fedlight.core.rng import Stream, derive_seed
from fedlight.data.digits import Digits
from fedlight.engines import make_engine
from fedlight.engines.base import LocalTask
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from fedlight.stages.attacks.alie import ALIE, paper_z
from fedlight.stages.attacks.gaussian import Gaussian
from fedlight.stages.attacks.ipm import IPM
from fedlight.stages.attacks.label_flip import LabelFlip
from fedlight.stages.attacks.scaled import Scaled
from fedlight.stages.attacks.sign_flip import SignFlip
from fedlight.store.checkpoint import load_checkpoint
from tests.conftest import TINY, rows_without_timings, run_killed_in_round
from tests.stages.test_pipeline import read_rows

FEDERATION = Federation(num_clients=10, trainable=frozenset({"w", "v"}), seed=3)
CTX = FEDERATION.round(2, selected=(0, 1, 2, 3, 4), lrs=(0.1,))
NOT_FINITE = ["attack=label_flip", "attack._target_=tests.helpers.user_attack.NotFiniteUpdates"]


def upload(client: int, w: list[float], buffer: float = 1.0) -> ClientUpload:
    """A FedAvg-shaped upload: two parameters' deltas and a buffer's."""
    tensors = {"w": torch.tensor(w), "v": torch.tensor([2.0 * client]), "b": torch.tensor(buffer)}
    return ClientUpload(client, num_samples=10 + client, num_steps=3, tensors=tensors)


def test_the_malicious_clients_are_a_fixed_set_drawn_from_the_seed() -> None:
    attack = SignFlip(fraction=0.2)
    chosen = attack.malicious_clients(100, seed=0)
    assert len(chosen) == 20 and chosen <= set(range(100))
    assert attack.malicious_clients(100, seed=0) == chosen
    assert attack.malicious_clients(100, seed=1) != chosen
    assert len(SignFlip(fraction=0.2, count=7).malicious_clients(100, seed=0)) == 7
    assert SignFlip(fraction=0.0).malicious_clients(100, seed=0) == frozenset()


def test_client_side_attacks_change_the_model_update_and_nothing_else() -> None:
    honest = upload(1, [1.0, -2.0])
    keys = FedAvg().model_update_keys(CTX, honest.tensors)
    assert keys == ["w", "v"]
    flipped = SignFlip(scale=4.0).corrupt_upload(CTX, honest, keys)
    assert torch.equal(flipped.tensors["w"], torch.tensor([-4.0, 8.0]))
    assert torch.equal(flipped.tensors["v"], torch.tensor([-8.0]))
    assert flipped.tensors["b"] is honest.tensors["b"]  # the buffer's delta travels as it was
    assert list(flipped.tensors) == list(honest.tensors)
    boosted = Scaled(scale=10.0).corrupt_upload(CTX, honest, keys)
    assert torch.equal(boosted.tensors["w"], torch.tensor([10.0, -20.0]))
    assert boosted.tensors["b"] is honest.tensors["b"]

    scaffold_keys = Scaffold().model_update_keys(
        CTX, {DELTA_Y + "w": torch.zeros(1), DELTA_Y + "b": torch.zeros(1), DELTA_C + "w": 0}
    )
    assert scaffold_keys == [DELTA_Y + "w"]  # Δy of the parameters; not buffers, not Δc


def test_the_gaussian_attack_draws_noise_of_the_updates_scale_from_the_derived_generator() -> None:
    update = {"w": torch.linspace(-3, 3, 40_000), "v": torch.full((10,), 0.5)}
    attack = Gaussian(scale=10.0)
    noise = attack.corrupt(CTX, 4, update)
    assert torch.equal(noise["w"], attack.corrupt(CTX, 4, update)["w"])  # same seed, round, client
    assert not torch.equal(noise["w"], attack.corrupt(CTX, 5, update)["w"])
    rms = update["w"].square().mean().sqrt()
    assert noise["w"].std().item() == pytest.approx(10 * rms.item(), rel=0.02)
    generator = torch.Generator().manual_seed(derive_seed(3, Stream.ATTACK, 2, 4))
    expected = torch.randn(40_000, generator=generator) * (10 * rms.double().item())
    assert torch.allclose(noise["w"], expected.float())


def test_alie_and_ipm_forge_the_malicious_updates_from_the_benign_ones() -> None:
    uploads = [upload(c, [float(c), float(c * c)]) for c in range(5)]
    malicious = frozenset({1, 3})
    benign = torch.tensor([[0.0, 0.0, 0.0], [2.0, 4.0, 4.0], [4.0, 16.0, 8.0]])  # w, w, v rows

    def keys_of(u: ClientUpload) -> list[str]:
        return FedAvg().model_update_keys(CTX, u.tensors)

    z = NormalDist().inv_cdf((5 - (5 // 2 + 1 - 2)) / 5)
    assert paper_z(5, 2) == pytest.approx(z)
    assert paper_z(20, 4) == pytest.approx(NormalDist().inv_cdf(13 / 20))
    forged = list(ALIE(fraction=0.2).forge_uploads(CTX, uploads, malicious, keys_of))
    expected = benign.mean(0) - z * benign.std(0)
    for c in (1, 3):
        got = torch.cat([forged[c].tensors["w"], forged[c].tensors["v"]])
        assert torch.allclose(got, expected)
        assert forged[c].tensors["b"] is uploads[c].tensors["b"]
    for c in (0, 2, 4):
        assert forged[c] is uploads[c]

    forged = list(IPM(epsilon=0.5).forge_uploads(CTX, uploads, malicious, keys_of))
    got = torch.cat([forged[3].tensors["w"], forged[3].tensors["v"]])
    assert torch.allclose(got, -0.5 * benign.mean(0))
    # A client-side attack passes the uploads through untouched, one at a time.
    passed = SignFlip().forge_uploads(CTX, iter(uploads), malicious, keys_of)
    assert list(passed) == uploads


@pytest.mark.parametrize("engine", ["sequential", "vectorized"])
def test_label_flipping_trains_as_on_a_flipped_copy_without_copying_the_data(
    make_job: Callable[[list[str]], Job], engine: str
) -> None:
    job = make_job([*TINY, f"fl.engine={engine}"])
    data = Digits().load()
    module = job.model(input_shape=data.input_shape, num_classes=data.num_classes)
    start = {name: t.clone() for name, t in module.state_dict().items()}
    flip = LabelFlip(fraction=0.1).label_map(data.num_classes, data.train_y.device)
    assert flip is not None and flip.tolist() == list(range(9, -1, -1))
    clients = [torch.arange(0, 50), torch.arange(50, 90)]
    labels_before = data.train_y.clone()
    attacked = make_engine(module, data, job.settings).train(
        [LocalTask(0, clients[0], start, [], flip), LocalTask(1, clients[1], start, [])], 1, [0.05]
    )
    attacked = [{n: t.clone() for n, t in r.weights.items()} for r in attacked]
    assert torch.equal(data.train_y, labels_before)

    flipped = replace(data, train_y=9 - data.train_y)
    on_copy = make_engine(module, flipped, job.settings).train(
        [LocalTask(0, clients[0], start, [])], 1, [0.05]
    )
    copy_weights = next(iter(on_copy)).weights
    assert all(torch.allclose(attacked[0][n], copy_weights[n], atol=1e-6) for n in copy_weights)
    honest = make_engine(module, data, job.settings).train(
        [LocalTask(1, clients[1], start, [])], 1, [0.05]
    )
    honest_weights = next(iter(honest)).weights
    assert all(torch.allclose(attacked[1][n], honest_weights[n], atol=1e-6) for n in start)


def test_a_rejected_update_leaves_the_mean_of_the_others() -> None:
    algorithm = FedAvg(aggregator=Mean())
    uploads = [upload(0, [1.0, 2.0]), upload(1, [math.nan, 0.0]), upload(2, [3.0, -1.0])]
    aggregation = algorithm.start_aggregation([u.num_samples for u in uploads])
    assert [aggregation.add(algorithm.contribution(CTX, u)) for u in uploads] == [True, False, True]
    assert aggregation.rejected == [1]
    assert [c for c, _, _ in aggregation.contributors] == [0, 2]
    results = aggregation.results()
    accepted = [uploads[0], uploads[2]]
    for part in (UPDATE, BUFFERS):
        split = [algorithm.split(CTX, u)[part] for u in accepted]
        expected = WeightedMean()(split, [10.0, 12.0])
        assert all(torch.allclose(results[part][n], expected[n]) for n in expected)


def test_nan_and_inf_updates_are_never_averaged_and_the_run_goes_on(
    make_job: Callable[[list[str]], Job], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = make_job([*TINY, *NOT_FINITE, "attack.count=3"])
    summary = run_job(job, tmp_path)
    rows = read_rows(tmp_path)
    assert [r["rejected"] for r in rows] == [r["malicious"] for r in rows]
    assert sum(float(r["rejected"]) for r in rows) > 0
    assert all(math.isfinite(float(r["train_loss"])) for r in rows)
    assert summary["diverged_at_round"] is None
    weights = load_checkpoint(tmp_path / "checkpoint.pt")["server_weights"]
    assert all(t.isfinite().all() for t in weights.values())
    said = capsys.readouterr().err
    assert said.count("has NaN or Inf entries; it is left out of the aggregate") == 1
    counts = json.loads((tmp_path / "participation.json").read_text())["counts"]
    malicious = job.stages.attack.malicious_clients(10, job.settings.seed)
    assert sum(float(r["malicious"]) for r in rows) == sum(counts[str(c)] for c in malicious)


def test_a_round_whose_every_update_is_rejected_keeps_the_global_model(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """Nothing finite came back: the model is kept, and the round counts as diverged (stop, or
    go on with `fl.on_divergence=continue`)."""
    job = make_job([*TINY, *NOT_FINITE, "attack.fraction=1.0", "fl.on_divergence=continue"])
    summary = run_job(job, tmp_path)
    rows = read_rows(tmp_path)
    initial = load_checkpoint(tmp_path / "checkpoint.pt")["server_weights"]
    assert {r["test_accuracy"] for r in rows} == {rows[0]["test_accuracy"]}
    assert all(r["rejected"] == r["participants"] for r in rows)
    assert all(r["train_loss"] == "nan" for r in rows)
    assert summary["diverged_at_round"] == 1 and summary["rounds"] == 4
    assert "every client update had NaN/Inf entries" in summary["divergence"]
    assert all(t.isfinite().all() for t in initial.values())


def test_a_round_with_too_few_updates_for_krum_is_refused_and_the_model_kept(
    make_job: Callable[[list[str]], Job], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Most of 3,000 clients hold none of the digits: rounds have fewer than 2f + 3 updates."""
    job = make_job(
        [*TINY, "fl.num_clients=3000", "fl.clients_per_round=6", "fl.rounds=2", "aggregator=krum"]
    )
    run_job(job, tmp_path)
    rows = read_rows(tmp_path)
    refused = [r for r in rows if r.get("aggregation_refused") == "1.0"]
    assert refused
    previous = {r["round"]: p for p, r in zip([None, *rows], rows, strict=False)}
    for row in refused:
        assert float(row["participants"]) < 5
        before = previous[row["round"]]
        if before is not None:
            assert row["test_accuracy"] == before["test_accuracy"]
    assert "aggregator=krum needs n ≥ 2f + 3" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algo=local", "attack=sign_flip"], "attack=sign_flip does not apply to algo=local"),
        (["attack=alie", "fl.exchange=sums"], "fl.exchange=sums cannot run attack=alie"),
        (["attack.fraction=0.2"], "attack=none has no malicious clients"),
        (["attack=gaussian", "attack.count=11"], "attack.count=11 exceeds fl.num_clients=10"),
        (["attack=sign_flip", "attack.fraction=1.5"], "attack.fraction=1.5 must be in [0, 1]"),
        (["attack=sign_flip", "attack.scale=-1"], "attack.scale=-1 must be > 0"),
        (["aggregator=krum", "fl.clients_per_round=4"], "fl.clients_per_round=4: aggregator=krum"),
    ],
)
def test_nonsense_attack_settings_are_refused_in_one_line(
    make_job: Callable[[list[str]], Job], overrides: list[str], message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        make_job([*TINY, *overrides])
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_a_run_under_attack_resumes_bit_exactly(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    attacked = [*TINY, "attack=gaussian", "attack.count=3", "aggregator=trimmed_mean"]
    run_job(make_job(attacked), tmp_path / "full")
    run_killed_in_round(make_job(attacked), tmp_path / "killed", 3, monkeypatch)
    run_job(make_job([*attacked, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    assert rows_without_timings(tmp_path / "resumed") == rows_without_timings(tmp_path / "full")
    full = load_checkpoint(tmp_path / "full" / "checkpoint.pt")["server_weights"]
    resumed = load_checkpoint(tmp_path / "resumed" / "checkpoint.pt")["server_weights"]
    assert all(torch.equal(full[name], resumed[name]) for name in full)


def test_round_aggregation_rejects_across_workers_as_one_worker_would() -> None:
    """`fl.exchange=sums`: each worker streams its share; the rejections travel with the
    outcomes and the merged mean renormalizes over the accepted clients of both."""
    algorithm = FedAvg(aggregator=Mean())
    uploads = [upload(0, [1.0, 2.0]), upload(1, [math.inf, 0.0]), upload(2, [3.0, -1.0])]
    counts = [u.num_samples for u in uploads]
    one = algorithm.start_aggregation(counts)
    for u in uploads:
        one.add(algorithm.contribution(CTX, u))
    shares = [algorithm.start_aggregation(counts), algorithm.start_aggregation(counts)]
    flags = [
        not shares[0].add(algorithm.contribution(CTX, uploads[0])),
        not shares[1].add(algorithm.contribution(CTX, uploads[1])),
    ]
    flags.append(not shares[1].add(algorithm.contribution(CTX, uploads[2])))
    partials = [share.partials() for share in shares]
    merged: RoundAggregation = algorithm.start_aggregation(counts)
    merged.combine(partials, [u.contributor for u in uploads], flags, [False] * 3)
    assert merged.rejected == one.rejected == [1]
    assert merged.contributors == one.contributors
    for part, expected in one.results().items():
        got = merged.results()[part]
        assert all(torch.allclose(got[n], expected[n]) for n in expected)
