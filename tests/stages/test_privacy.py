"""Differential privacy on the round: clipping bounds every contribution, the server's noise has
the stated std, ε in metrics.csv is the accountant library's, target-ε calibration inverts it, the
budget stops a run with its checkpoint intact, resume is bit-exact, and settings that would void
the guarantee are refused in one line."""

import csv
import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from opacus.accountants import RDPAccountant

from fedlight.algorithms.base import Algorithm
from fedlight.algorithms.fedavg import UPDATE, FedAvg
from fedlight.algorithms.fednova import FedNova
from fedlight.algorithms.scaffold import Scaffold
from fedlight.core.context import Federation
from fedlight.core.errors import ConfigError
from fedlight.core.messages import ClientUpload, Delivered, LocalResult, ServerState
from fedlight.core.rng import Stream
from fedlight.core.tensors import detached_copy
from fedlight.data.base import TensorDataset
from fedlight.engines.base import Engine, LocalTask
from fedlight.engines.sequential import SequentialEngine
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from fedlight.stages.privacy.accountant import CALIBRATION_TOLERANCE, ORDERS, PRV_EPS_ERROR, epsilon
from fedlight.stages.privacy.adaptive_clip import AdaptiveClip
from fedlight.stages.privacy.base import as_state, default_delta, update_norm
from fedlight.stages.privacy.dp_fedavg import DPFedAvg, PrivateAggregation
from fedlight.stages.privacy.dp_sgd import DPSGDEngine
from tests.conftest import REPO, TINY, rows_without_timings, run_cli, run_killed_in_round
from tests.helpers.independent_dp import PLD_INTERVAL, RdpAccountant, pld_epsilon, sampled_gaussian

USER_LEVEL = [*TINY, "selection=poisson", "privacy=dp_fedavg"]
FEDERATION = Federation(num_clients=100, trainable=frozenset({"w", "b"}))


def read_rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def random_upload(client: int, scale: float) -> ClientUpload:
    generator = torch.Generator().manual_seed(client)
    tensors = {
        "w": scale * torch.randn(30, 20, generator=generator),
        "b": scale * torch.randn(20, generator=generator),
    }
    return ClientUpload(client, 10 + client, 3, tensors)


def test_every_contribution_is_clipped_to_the_clip_norm_on_the_client_and_the_server() -> None:
    """Long updates are scaled to norm C, short ones kept; the server's sum (no noise) over the
    expected count is Σ clipped / E, and each upload alone adds at most C / E to it, also when a
    lossy wire lengthened it after the client clipped."""
    privacy = DPFedAvg(clip=0.5, noise_multiplier=0.0)
    state = as_state(clip=0.5, noise_multiplier=0.0, expected=4.0, public_steps=3)
    ctx = FEDERATION.round(1, (0, 1, 2, 3), (0.1,))
    uploads = [random_upload(c, scale) for c, scale in enumerate((0.001, 0.01, 1.0, 10.0))]
    clipped = [privacy.clip_upload(ctx, state, FedAvg(), upload)[0] for upload in uploads]
    for upload, sent in zip(uploads, clipped, strict=True):
        norm = float(update_norm(upload.tensors))
        assert float(update_norm(sent.tensors)) == pytest.approx(min(norm, 0.5), rel=1e-6)
    assert "privacy.clipped" not in ctx.metrics.values  # an un-noised count: not released

    def aggregate(sent: list[ClientUpload]) -> torch.Tensor:
        generator = torch.Generator().manual_seed(0)
        aggregation = PrivateAggregation(
            ctx, FedAvg(), [10] * len(sent), 4.0, 0.5, 0.0, generator, (10, 3)
        )
        for upload in sent:
            aggregation.add(FedAvg().contribution(ctx, upload))
        update = aggregation.results()[UPDATE]
        assert update is not None
        return torch.cat([update["w"].flatten(), update["b"].flatten()])

    expected = sum(torch.cat([u.tensors["w"].flatten(), u.tensors["b"].flatten()]) for u in clipped)
    assert torch.allclose(aggregate(clipped), expected / 4.0, atol=1e-7)
    lengthened = ClientUpload(9, 10, 3, {k: 3 * t for k, t in clipped[3].tensors.items()})
    assert float(aggregate([lengthened]).norm()) <= 0.5 / 4.0 * (1 + 1e-6)


def test_the_server_noise_has_std_z_clip_over_the_expected_participants() -> None:
    """N(0, (z·C)²) on the sum, divided by E: over 200,000 entries the sample std is within 1% of
    z·C/E (its own std is about 0.16%) and the mean within 5 standard errors of the true mean;
    the noise is the round's: the same generator seed gives the same noise."""
    ctx = FEDERATION.round(3, (0, 1), (0.1,))
    zeros = ClientUpload(0, 5, 1, {"w": torch.zeros(200_000), "b": torch.zeros(1)})

    def noised(seed: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed)
        aggregation = PrivateAggregation(
            ctx, FedAvg(), [5, 5], 10.0, 0.5, 2.0 * 0.5, generator, (5, 1)
        )
        aggregation.add(FedAvg().contribution(ctx, zeros))
        aggregation.add(FedAvg().contribution(ctx, zeros))
        update = aggregation.results()[UPDATE]
        assert update is not None
        return update["w"]

    noise = noised(0)
    std = 2.0 * 0.5 / 10.0
    assert abs(float(noise.std()) / std - 1) < 0.01
    assert abs(float(noise.mean())) < 5 * std / math.sqrt(noise.numel())
    assert torch.equal(noised(0), noise) and not torch.equal(noised(1), noise)


def test_the_server_noise_is_the_generators_float64_draws_in_key_order() -> None:
    """On a zero sum the noised mean is, entry for entry, the generator's float64 normal draws
    (one tensor after another in the upload's key order) times z·C/E, cast to float32: the same
    draws whatever the entries' dtype or device."""
    ctx = FEDERATION.round(3, (0,), (0.1,))
    zeros = ClientUpload(0, 5, 1, {"w": torch.zeros(6, 4), "b": torch.zeros(4)})
    aggregation = PrivateAggregation(
        ctx, FedAvg(), [5], 4.0, 0.5, 2.0 * 0.5, torch.Generator().manual_seed(11), (5, 1)
    )
    aggregation.add(FedAvg().contribution(ctx, zeros))
    update = aggregation.results()[UPDATE]
    assert update is not None
    generator = torch.Generator().manual_seed(11)
    for key in ("w", "b"):
        drawn = torch.randn(zeros.tensors[key].shape, generator=generator, dtype=torch.float64)
        assert torch.equal(update[key], (drawn * (2.0 * 0.5 / 4.0)).float())


def test_scaffold_clips_and_noises_both_parts_of_its_upload_as_one_vector() -> None:
    """The unit of privacy is the whole upload: Δy and Δc are clipped together to C."""
    federation = Federation(num_clients=10, trainable=frozenset({"w"}))
    ctx = federation.round(1, (0,), (0.1,))
    algorithm = Scaffold()
    long = ClientUpload(0, 10, 3, {"delta_y/w": torch.full((4,), 3.0), "delta_c/w": torch.ones(4)})
    aggregation = PrivateAggregation(
        ctx, algorithm, [10], 1.0, 1.0, 0.0, torch.Generator().manual_seed(0), (10, 3)
    )
    aggregation.add(algorithm.contribution(ctx, long))
    parts = aggregation.results()
    joint = torch.cat([t.flatten() for part in parts.values() if part for t in part.values()])
    assert float(joint.norm()) == pytest.approx(1.0, rel=1e-6)


def test_adaptive_clipping_moves_the_clip_norm_geometrically_toward_the_quantile() -> None:
    """Andrew et al. 2021: with every update clipped (b̄ = 0) C grows by exp(η_C·γ); with none
    clipped it shrinks by exp(−η_C·(1 − γ)) (count noise 10⁻⁹: the arithmetic, not the noise);
    the updates' noise multiplier is (z⁻² − (2σ_b)⁻²)^(−1/2)."""
    privacy = AdaptiveClip(clip=0.1, noise_multiplier=1.0, count_noise=1e-9)
    state = as_state(clip=0.1, noise_multiplier=1.0, expected=4.0, count_noise=1e-9) | as_state(
        delta=0.01, sampling_rate=0.1
    )
    ctx = FEDERATION.round(1, (0, 1, 2, 3), (0.1,))
    clipped_all = [Delivered(c, 3, {"unclipped": 0.0}, True) for c in range(4)]
    grown = privacy.finish_round(ctx, state, clipped_all)
    assert float(grown["clip"]) == pytest.approx(0.1 * math.exp(0.2 * 0.5), rel=1e-6)
    kept_all = [Delivered(c, 3, {"unclipped": 1.0}, True) for c in range(4)]
    shrunk = privacy.finish_round(ctx, state, kept_all)
    assert float(shrunk["clip"]) == pytest.approx(0.1 * math.exp(-0.2 * 0.5), rel=1e-6)
    assert ctx.metrics.values["privacy.unclipped_fraction"] == pytest.approx(1.0)
    wide = as_state(noise_multiplier=1.0, count_noise=2.0)
    assert privacy.update_noise_multiplier(wide) == pytest.approx((1 - 1 / 16) ** -0.5)
    short = as_state(clip=0.1, public_steps=3)
    _, reports = privacy.clip_upload(ctx, short, FedAvg(), random_upload(0, 10.0))
    assert reports == {"unclipped": 0.0}
    _, reports = privacy.clip_upload(ctx, short, FedAvg(), random_upload(0, 1e-4))
    assert reports == {"unclipped": 1.0}


@pytest.mark.parametrize("accountant", ["prv", "rdp"])
def test_epsilon_per_round_is_the_accountants_and_delta_defaults_below_one_over_n(
    make_job: Callable[[list[str]], Job], tmp_path: Path, accountant: str
) -> None:
    """Each round's ε is the configured accountant's for (q = 4/10, z, rounds so far, δ), checked
    against Google's dp-accounting (PLD within PRV's stated error; RDP at the same orders); δ
    defaults to min(10⁻⁵, 0.1/N) = 10⁻⁵ with N = 10."""
    overrides = [*USER_LEVEL, "privacy.noise_multiplier=1.3", f"privacy.accountant={accountant}"]
    run_job(make_job(overrides), tmp_path)
    rows = read_rows(tmp_path)
    for rounds, row in enumerate(rows, start=1):
        event = sampled_gaussian(4 / 10, 1.3, rounds)
        reported = float(row["epsilon"])
        if accountant == "prv":
            exact = pld_epsilon(4 / 10, 1.3, rounds, 1e-5)
            assert exact - PLD_INTERVAL <= reported <= exact + 2 * PRV_EPS_ERROR
        else:
            independent = RdpAccountant(orders=list(ORDERS))
            independent.compose(event)
            assert reported == pytest.approx(independent.get_epsilon(1e-5), rel=1e-3)
        assert float(row["privacy.delta"]) == 1e-5
        assert "privacy.clipped" not in row
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["epsilon"] == float(rows[-1]["epsilon"])
    assert summary["privacy.noise_multiplier"] == 1.3


# One expected participant of 20 a round: with seed 0, nobody takes part in round 5.
EMPTY_ROUND = 5
SPARSE = [
    *TINY,
    "fl.num_clients=20",
    "fl.clients_per_round=1",
    "selection=poisson",
    "privacy=dp_fedavg",
    "privacy.clip=0.1",
]


def test_a_round_without_participants_releases_the_model_noised_and_is_accounted(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """McMahan et al. 2018 (Algorithm 1) noise every round: the empty round 5 moves the model by
    the noise on a zero sum over E, std z·C/E = 0.1 on each of the MLP's 55,050 weights (the
    sample std within 3%), where it kept the model bit for bit; ε after the 5 rounds, all
    noised, is PRV's bound on dp-accounting's PLD value for 5 rounds (q = 1/20, z = 1)."""
    run_job(make_job([*SPARSE, f"fl.rounds={EMPTY_ROUND - 1}"]), tmp_path / "before")
    summary = run_job(make_job([*SPARSE, f"fl.rounds={EMPTY_ROUND}"]), tmp_path / "after")
    assert float(read_rows(tmp_path / "after")[-1]["participants"]) == 0

    def weights(run: str) -> dict[str, torch.Tensor]:
        return torch.load(tmp_path / run / "checkpoint.pt", weights_only=True)["server_weights"]

    before, after = weights("before"), weights("after")
    moved = torch.cat([(after[k] - before[k]).flatten() for k in before])
    assert abs(float(moved.std()) / 0.1 - 1) < 0.03
    assert abs(float(moved.mean())) < 5 * 0.1 / math.sqrt(moved.numel())
    exact = pld_epsilon(1 / 20, 1.0, EMPTY_ROUND, 1e-5)
    assert exact - PLD_INTERVAL <= summary["epsilon"] <= exact + 2 * PRV_EPS_ERROR
    assert summary["privacy"]["epsilon_accountant"] == "prv"


@pytest.mark.parametrize(
    ("algorithm", "extras"),
    [(FedAvg(), {}), (Scaffold(), {"control/w": 0.1}), (FedNova(), {})],
    ids=["fedavg", "scaffold", "fednova"],
)
def test_the_noise_of_a_round_without_uploads_is_that_of_any_round(
    algorithm: Algorithm, extras: dict[str, float]
) -> None:
    """No upload: the zero sum gets N(0, (z·C)²) per entry over E = 5, shaped as an upload of the
    algorithm: the model moves with std z·C/E = 0.2 (FedNova's τ_pub·noise over τ_pub) and
    SCAFFOLD's c with std z·C/N = 0.1, as in a round with participants."""
    server = released_update(algorithm, [], 1.0, 100_000)
    assert float(server.weights["w"].std()) == pytest.approx(0.2, rel=0.01)
    assert {k: float(server.extras[k].std()) for k in extras} == pytest.approx(extras, rel=0.01)


@pytest.mark.parametrize(
    "mechanism",
    [
        ["selection=poisson", "privacy=dp_fedavg"],
        ["selection=poisson", "privacy=adaptive_clip", "privacy.count_noise=1"],
        ["privacy=dp_sgd"],
    ],
    ids=["dp_fedavg", "adaptive_clip", "dp_sgd"],
)
def test_noise_from_the_os_differs_between_runs_of_one_seed_and_noise_from_the_seed_repeats(
    make_job: Callable[[list[str]], Job], tmp_path: Path, mechanism: list[str]
) -> None:
    """`privacy.noise_source=seed` (the default) derives the noise from the config's seed: two
    runs are identical; `os` seeds it from the operating system once per run: two runs of the
    same config differ. summary.json records the source."""
    private = [*TINY, *mechanism, "fl.rounds=2"]
    for source, repeats in (("seed", True), ("os", False)):
        rows = []
        for run in ("first", "second"):
            overrides = [*private, f"privacy.noise_source={source}"]
            summary = run_job(make_job(overrides), tmp_path / source / run)
            assert summary["privacy"]["noise_source"] == source
            rows.append(rows_without_timings(tmp_path / source / run))
        assert (rows[0] == rows[1]) == repeats


def test_every_worker_takes_the_main_workers_noise_seed_from_the_os() -> None:
    """Each worker's mechanism draws its own seed from the operating system; after
    `agree_on_noise` (the driver's broadcast of rank 0's) all draw the main worker's noise, and
    `seed` keeps deriving it from the config's seed."""
    workers = [DPFedAvg(noise_source="os") for _ in range(3)]
    main = workers[0].drawn
    for mechanism in workers:
        mechanism.agree_on_noise(lambda value: main)
    ctx = FEDERATION.round(2)
    draws = [torch.randn(4, generator=m.noise_generator(ctx)) for m in workers]
    assert all(torch.equal(draw, draws[0]) for draw in draws)
    seeded = DPFedAvg()
    assert seeded.noise_seed(7) == 7
    assert torch.equal(
        torch.randn(4, generator=seeded.noise_generator(ctx)),
        torch.randn(4, generator=ctx.torch_generator(Stream.PRIVACY)),
    )


def test_default_delta_is_below_a_tenth_over_the_protected_set() -> None:
    assert default_delta(100) == 1e-5
    assert default_delta(60_000) == pytest.approx(0.1 / 60_000)
    assert default_delta(10**6) == pytest.approx(1e-7)


def test_target_epsilon_is_met_by_the_calibrated_noise_and_the_budget_stops_a_longer_run(
    make_job: Callable[[list[str]], Job], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Calibrated for 4 rounds, the run ends at ε just below the target; resumed with 8 rounds it
    keeps its noise, refuses round 5 (it would exceed the budget) and stops with its checkpoint
    as it was, saying why on the console and in summary.json."""
    budget = [*USER_LEVEL, "privacy.noise_multiplier=null", "privacy.target_epsilon=3"]
    run_job(make_job(budget), tmp_path / "run")
    final = float(read_rows(tmp_path / "run")[-1]["epsilon"])
    assert 3 - CALIBRATION_TOLERANCE <= final <= 3
    checkpoint = (tmp_path / "run" / "checkpoint.pt").read_bytes()
    longer = make_job([*budget, "fl.rounds=8", f"resume={tmp_path / 'run'}"])
    summary = run_job(longer, tmp_path / "run")
    assert summary["rounds"] == 4 and "round 5 would spend epsilon=" in summary["stopped"]
    assert f"fedlight: {summary['stopped']}" in capsys.readouterr().err.splitlines()
    assert (tmp_path / "run" / "checkpoint.pt").read_bytes() == checkpoint
    assert len(read_rows(tmp_path / "run")) == 4


@pytest.mark.parametrize(
    "mechanism",
    [
        ["privacy=adaptive_clip", "privacy.count_noise=1"],
        ["privacy=dp_fedavg", "algo=scaffold", "upload=[int8]"],
    ],
)
def test_a_killed_private_run_resumes_bit_exactly_with_its_accountant_and_clip_norm(
    make_job: Callable[[list[str]], Job],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mechanism: list[str],
) -> None:
    private = [*TINY, "selection=poisson", *mechanism]
    run_job(make_job(private), tmp_path / "full")
    run_killed_in_round(make_job(private), tmp_path / "killed", 3, monkeypatch)
    run_job(make_job([*private, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    full = rows_without_timings(tmp_path / "full")
    assert rows_without_timings(tmp_path / "resumed") == full
    assert len({row["privacy.clip"] for row in full}) == (4 if "adaptive" in mechanism[0] else 1)
    assert "privacy.clipped" not in full[0]  # how many were clipped is released noised, or not
    assert ("privacy.unclipped_fraction" in full[0]) == ("adaptive" in mechanism[0])


def test_dp_sgd_clips_each_examples_gradient_and_without_clip_or_noise_is_sgd(
    make_job: Callable[[list[str]], Job],
) -> None:
    """One full-batch step (B ≥ n: rate 1) of lr 1: with per-example clip C and no noise the
    model moves by at most C; with a clip no gradient reaches and no noise it is plain SGD's
    step."""
    job = make_job([*TINY, "privacy=dp_sgd", "local.batch_size=1000", "optim.lr=1.0"])
    data = job.data.load()
    module = job.model(input_shape=data.input_shape, num_classes=data.num_classes)
    start = detached_copy(module.state_dict())
    task = LocalTask(0, torch.arange(50), start, [])

    def moved(engine: Engine) -> dict[str, torch.Tensor]:
        (result,) = engine.train([task], 1, [1.0])
        step = {name: result.weights[name] - start[name] for name in start}
        engine.close()
        return step

    clipped = moved(DPSGDEngine(module, data, job.settings, 0.0, 1e-4, 0))
    assert 0 < float(update_norm(clipped)) <= 1e-4 * (1 + 1e-5)
    unclipped = moved(DPSGDEngine(module, data, job.settings, 0.0, 1e6, 0))
    plain = moved(SequentialEngine(module, data, job.settings))
    assert float(update_norm(plain)) > 1e-2
    assert all(torch.allclose(unclipped[k], plain[k], atol=1e-6) for k in plain)


def test_dp_sgd_reports_the_largest_client_epsilon_and_resumes_bit_exactly(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ε is the library's for the client that spent the most (its steps at rate B/n, δ = 1/n of
    the largest client); a killed run resumes bit-exactly, its steps per client included."""
    private = [*TINY, "privacy=dp_sgd", "privacy.noise_multiplier=1.1"]
    run_job(make_job(private), tmp_path / "full")
    checkpoint = torch.load(tmp_path / "full" / "checkpoint.pt", weights_only=True)
    state = checkpoint["stage_states"]["privacy"]
    steps, rates = state["steps"], state["sampling_rates"]
    delta = float(state["delta"])
    worst = 0.0
    for client in range(10):
        if steps[client] > 0:
            accountant = RDPAccountant()
            accountant.history = [(1.1, float(rates[client]), int(steps[client]))]
            worst = max(worst, accountant.get_epsilon(delta, alphas=list(ORDERS)))
    assert float(read_rows(tmp_path / "full")[-1]["epsilon"]) == pytest.approx(worst, rel=1e-12)
    run_killed_in_round(make_job(private), tmp_path / "killed", 3, monkeypatch)
    run_job(make_job([*private, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    assert rows_without_timings(tmp_path / "resumed") == rows_without_timings(tmp_path / "full")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["privacy=dp_fedavg"],
            r"^privacy=dp_fedavg accounts for Poisson .*; use selection=poisson$",
        ),
        (
            ["privacy=dp_fedavg", "selection=poisson", "aggregator=median"],
            r"^privacy=dp_fedavg sums .* aggregator=median .*; leave aggregator=mean$",
        ),
        (
            ["privacy=dp_fedavg", "selection=poisson", "algo=central"],
            r"^privacy=dp_fedavg does not apply to algo=central: .*algo=fedavg\)$",
        ),
        (
            ["privacy=dp_fedavg", "selection=poisson", "privacy.target_epsilon=1"],
            r"^privacy.noise_multiplier=1.0 and privacy.target_epsilon=1: give exactly one",
        ),
        (["privacy=dp_sgd", "fl.engine=vectorized"], r"^privacy=dp_sgd .*use fl.engine=auto$"),
        (
            ["privacy=dp_sgd", "selection=power_of_choice", "selection.candidates=6"],
            r"^privacy=dp_sgd does not cover selection=power_of_choice: it chooses clients by "
            r"the global model's loss on each candidate's training data, measured without noise"
            r", .*; use selection=random or selection=poisson$",
        ),
        (
            ["privacy=dp_sgd", "selection=weighted"],
            r"^privacy=dp_sgd does not cover selection=weighted: it chooses clients by each "
            r"participant's accuracy on its own training data, ",
        ),
        (
            ["privacy=dp_sgd", "algo=central"],
            r"^privacy=dp_sgd cannot account for algo=central: its trainer's sampling rate "
            r"B/\(draw size\) and steps change with each round's selection, ",
        ),
        (
            ["privacy=dp_fedavg", "selection=poisson", "privacy.accountant=pld"],
            r"^privacy.accountant=pld is not an accountant; use prv or rdp$",
        ),
    ],
)
def test_settings_that_would_void_the_guarantee_are_refused_in_one_line(
    make_job: Callable[[list[str]], Job], overrides: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        make_job([*TINY, *overrides])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["privacy=dp_sgd", "model._target_=tests.helpers.user_module.BatchNormModule"],
            r"^privacy=dp_sgd: the model is not Opacus-compatible \(.*BatchNorm.*simple_cnn\)$",
        ),
        (["privacy=dp_sgd", "algo=fedprox"], r"^privacy=dp_sgd trains with Opacus's optimizer, "),
    ],
)
def test_what_shows_only_once_the_run_starts_is_refused_in_one_line_before_training(
    make_job: Callable[[list[str]], Job], tmp_path: Path, overrides: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        run_job(make_job([*TINY, *overrides]), tmp_path)


@pytest.mark.parametrize(
    ("model", "shape"),
    [
        ("fedlight.models.mlp.MLP", (1, 28, 28)),
        ("fedlight.models.cnn.CNN", (1, 28, 28)),
        ("fedlight.models.simple_cnn.SimpleCNN", (1, 28, 28)),
        ("fedlight.models.cifar_cnn.CifarCNN", (3, 32, 32)),
    ],
)
def test_dp_sgd_trains_every_built_in_model(
    make_job: Callable[[list[str]], Job], model: str, shape: tuple[int, ...]
) -> None:
    """Opacus accepts each built-in model and one noisy step changes every parameter."""
    job = make_job([*TINY, "privacy=dp_sgd", f"model._target_={model}"])
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(8, *shape, generator=generator)
    y = torch.arange(8) % 10
    data = TensorDataset(x, y, x, y, 10)
    module = job.model(input_shape=shape, num_classes=10)
    start = detached_copy(module.state_dict())
    engine = DPSGDEngine(module, data, job.settings, 1.0, 1.0, 0)
    (result,) = engine.train([LocalTask(0, torch.arange(8), start, [])], 1, [0.1])
    engine.close()
    assert all(not torch.equal(result.weights[k], start[k]) for k in start)


def test_adaptive_clips_refusal_of_its_settings_comes_before_any_worker_or_data(
    tmp_path: Path,
) -> None:
    """σ_b = 0.4 leaves no noise for the updates at z = 1: refused in one line (exit 2) while the
    settings are checked, before two workers spawn or Fashion-MNIST is looked for in an empty
    data.root (which would fail as a missing download instead)."""
    result = run_cli(
        *TINY,
        "data=fmnist",
        f"data.root={tmp_path / 'no_data'}",
        "fl.workers=2",
        "selection=poisson",
        "privacy=adaptive_clip",
        "privacy.count_noise=0.4",
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "fedlight: error: privacy.noise_multiplier=1 must be below 2·σ_b=0.8 to leave noise for "
        "the updates (Andrew et al. 2021, Theorem 1); raise privacy.count_noise (null: max(E/20,"
        " z)), or use privacy=dp_fedavg"
    ]
    assert not (tmp_path / "outputs").exists()


def test_adaptive_clips_defaults_work_at_ten_clients_per_round(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """E = 10, z = 1: σ_b = max(E/20, z) = 1, the updates' multiplier (1 − 1/4)^(−1/2)."""
    overrides = [*TINY, "fl.rounds=1", "fl.clients_per_round=10", "selection=poisson"]
    run_job(make_job([*overrides, "privacy=adaptive_clip"]), tmp_path)
    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    state = checkpoint["stage_states"]["privacy"]
    assert float(state["count_noise"]) == 1.0
    privacy = AdaptiveClip()
    assert privacy.update_noise_multiplier(state) == pytest.approx(0.75**-0.5)


# SCAFFOLD and FedNova under DP-FedAvg: the server update sees only public counts -------------

PUBLIC_STEPS = 4  # the stand-in participant's local steps (the mean client's)


def released_update(
    algorithm: Algorithm, uploads: list[ClientUpload], noise: float, size: int
) -> ServerState:
    """The server state after one DP-FedAvg round of `uploads` (clipped on the client to C = 1,
    summed, N(0, noise²) added, over E = 5), of a federation of N = 10 whose parameter "w" has
    `size` entries, starting from zeros."""
    start = {"w": torch.zeros(size, dtype=torch.float64)}
    federation = Federation(
        num_clients=10, trainable=frozenset({"w"}), seed=0, initial_weights=start
    )
    ctx = federation.round(1, tuple(u.client_id for u in uploads), (0.1,))
    privacy = DPFedAvg(clip=1.0, noise_multiplier=noise)
    state = as_state(
        clip=1.0,
        noise_multiplier=noise,
        expected=5.0,
        public_samples=100,
        public_steps=PUBLIC_STEPS,
    )
    server = algorithm.init_server(start, federation)
    aggregation = privacy.start_aggregation(ctx, state, algorithm, [u.num_samples for u in uploads])
    for upload in uploads:
        aggregation.add(
            algorithm.contribution(ctx, privacy.clip_upload(ctx, state, algorithm, upload)[0])
        )
    aggregates = aggregation.results()
    return algorithm.server_update(ctx, server, aggregates, aggregation.public_contributors)


def scaffold_uploads(count: int, size: int, delta_c: float) -> list[ClientUpload]:
    """`count` SCAFFOLD uploads of Δy = 0 and Δc = `delta_c` everywhere, unequal sizes and steps."""
    return [
        ClientUpload(
            client,
            10 * (client + 1),
            client + 2,
            {
                "delta_y/w": torch.zeros(size, dtype=torch.float64),
                "delta_c/w": torch.full((size,), delta_c, dtype=torch.float64),
            },
        )
        for client in range(count)
    ]


def fednova_uploads(count: int, size: int, per_step: float) -> list[ClientUpload]:
    """`count` FedNova uploads of clients that took 2, 3, 4, ... steps, each moving `per_step`
    per step and entry, as FedNova's client computes them (d_i = Δ_i / τ_i)."""
    fednova = FedNova()
    federation = Federation(num_clients=10, trainable=frozenset({"w"}))
    ctx = federation.round(1)
    start = {"w": torch.zeros(size, dtype=torch.float64)}
    uploads = []
    for client in range(count):
        steps = client + 2
        moved = {"w": torch.full((size,), per_step * steps, dtype=torch.float64)}
        local = LocalResult(client, moved, 10 * (client + 1), steps, 0.1, 0.0)
        uploads.append(fednova.upload(ctx, start, local, None)[0])
    return uploads


@pytest.mark.parametrize("count", [3, 6])
def test_scaffolds_released_control_moves_by_the_sum_over_n_with_noise_independent_of_s(
    count: int,
) -> None:
    """E = 5, N = 10: c moves by (E/N)·(Σ Δc_i + noise)/E = (Σ Δc_i + noise)/N whether 3 or 6
    clients took part (0.003 or 0.006 for Δc_i = 0.01), and the noise on c has std z·C/N = 0.1
    in both cases (with |S|/N in place of E/N it was 0.06 and 0.12)."""
    exact = released_update(Scaffold(), scaffold_uploads(count, 4, 0.01), 0.0, 4)
    assert exact.extras["control/w"].tolist() == pytest.approx([count * 0.01 / 10] * 4)
    noised = released_update(Scaffold(), scaffold_uploads(count, 100_000, 0.0), 1.0, 100_000)
    assert float(noised.extras["control/w"].std()) == pytest.approx(0.1, rel=0.01)


@pytest.mark.parametrize("count", [3, 6])
def test_fednovas_released_step_uses_the_public_step_count_with_noise_independent_of_s(
    count: int,
) -> None:
    """Each client sends d_i = Δ_i/τ_i (0.01 per entry for all, with τ_i = 2, 3, ...), clipped
    to C/τ_pub; the server steps by τ_pub·(Σ d_i + noise)/E with the public τ_pub = 4, not the
    participants' own: 4·0.03/5 = 0.024 for 3 clients, 0.048 for 6; the noise N(0, (z·C/τ_pub)²)
    on the sum makes the step's std z·C/E = 0.2, FedAvg's, whoever took part."""
    exact = released_update(FedNova(), fednova_uploads(count, 4, 0.01), 0.0, 4)
    assert exact.weights["w"].tolist() == pytest.approx([PUBLIC_STEPS * count * 0.01 / 5] * 4)
    noised = released_update(FedNova(), fednova_uploads(count, 100_000, 0.0), 1.0, 100_000)
    assert float(noised.weights["w"].std()) == pytest.approx(1.0 / 5, rel=0.01)
    # the clip bounds τ_pub·d_i: a client of 2 steps moving 1 per step and entry is cut to 1/4
    (long,) = fednova_uploads(1, 4, 1.0)
    privacy = DPFedAvg(clip=1.0)
    state = as_state(clip=1.0, public_steps=PUBLIC_STEPS)
    sent, _ = privacy.clip_upload(FEDERATION.round(1), state, FedNova(), long)
    assert float(update_norm(sent.tensors)) == pytest.approx(1.0 / PUBLIC_STEPS)


# Buffers ------------------------------------------------------------------------------------------

COUNTING = ["model._target_=tests.helpers.user_module.CountingModule", "fl.rounds=2"]


def test_a_model_with_integer_buffers_trains_under_dp_fedavg_its_counts_staying_on_the_client(
    tmp_path: Path,
) -> None:
    """An int64 buffer (a step count) is neither clipped nor noised, so it never leaves the
    client (8 bytes less up than down per participant) and the server keeps its own (0)."""
    run = tmp_path / "run"
    # from the repository, where `tests.helpers.user_module` imports (as a user's own module would)
    run_cli(*USER_LEVEL, *COUNTING, f"hydra.run.dir={run}", cwd=REPO)
    rows = read_rows(run)
    for row in rows:
        participants = int(float(row["participants"]))
        assert int(row["bytes_down"]) - int(row["bytes_up"]) == 8 * participants
    weights = torch.load(run / "checkpoint.pt", weights_only=True)["server_weights"]
    assert int(weights["steps"]) == 0


def test_adaptive_clip_with_scaffold_keeps_integer_buffers_on_the_client(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    private = [*TINY, *COUNTING, "selection=poisson", "privacy=adaptive_clip", "algo=scaffold"]
    run_job(make_job(private), tmp_path)
    weights = torch.load(tmp_path / "checkpoint.pt", weights_only=True)["server_weights"]
    assert int(weights["steps"]) == 0
    assert len(read_rows(tmp_path)) == 2


@pytest.mark.parametrize("mechanism", ["dp_fedavg", "adaptive_clip"])
@pytest.mark.parametrize("algo", ["fedavg", "scaffold"])
def test_batch_norm_under_user_level_dp_is_refused_in_one_line_naming_group_norm(
    make_job: Callable[[list[str]], Job], tmp_path: Path, mechanism: str, algo: str
) -> None:
    """Noise on the running statistics' deltas drives variances negative (NaN at z = 1, which
    the divergence message blamed on the learning rate): refused before training, as Opacus
    refuses BatchNorm, naming the buffers and GroupNorm."""
    private = [*TINY, "selection=poisson", f"privacy={mechanism}", f"algo={algo}"]
    batch_norm = "model._target_=tests.helpers.user_module.BatchNormModule"
    message = (
        rf"^privacy={mechanism} adds noise to every floating-point entry of an upload, and the "
        r"model's buffers net\.1\.running_mean, net\.1\.running_var \(running statistics\) "
        r"would be noised into invalid values \(negative variances, then NaN\); use GroupNorm "
        r"or LayerNorm in place of BatchNorm .*model=simple_cnn\)$"
    )
    with pytest.raises(ConfigError, match=message):
        run_job(make_job([*private, batch_norm]), tmp_path / "batch_norm")
    group_norm = "model._target_=tests.helpers.user_module.GroupNormModule"
    summary = run_job(make_job([*private, group_norm]), tmp_path / "group_norm")
    assert summary["diverged_at_round"] is None and summary["rounds"] == 4


def test_a_checkpoint_from_before_the_public_counts_and_the_accountant_resumes(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FedNova run killed in round 3 whose checkpoint lacks the privacy state keys added since
    (`public_samples`, `public_steps`: they start at their initial values) resumes, here with
    privacy.accountant=rdp (any accountant may continue a run: the noise is the checkpoint's):
    every model number is the uninterrupted run's, and rounds 3 and 4 report RDP's ε."""
    private = [*USER_LEVEL, "algo=fednova", "privacy.clip=0.05"]
    run_job(make_job(private), tmp_path / "full")
    run_killed_in_round(make_job(private), tmp_path / "killed", 3, monkeypatch)
    path = tmp_path / "killed" / "checkpoint.pt"
    checkpoint = torch.load(path, weights_only=True)
    for key in ("public_samples", "public_steps"):
        del checkpoint["stage_states"]["privacy"][key]
    torch.save(checkpoint, path)
    resumed = [*private, "privacy.accountant=rdp", f"resume={tmp_path / 'killed'}"]
    run_job(make_job(resumed), tmp_path / "resumed")
    full, rows = rows_without_timings(tmp_path / "full"), rows_without_timings(tmp_path / "resumed")
    assert [{**r, "epsilon": ""} for r in rows] == [{**r, "epsilon": ""} for r in full]
    assert rows[:2] == full[:2]
    for row in rows[2:]:
        rdp = epsilon(0.4, 1.0, int(row["round"]), 1e-5, "rdp")
        assert float(row["epsilon"]) == pytest.approx(rdp, rel=1e-12)


def test_fednova_under_dp_fedavg_with_equal_steps_is_dp_fedavg(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """Every TINY client takes 5 steps, the public count too: FedNova's clipped, noised d_i times
    τ_eff = 5 is DP-FedAvg's update, noise included (it was τ_eff times FedAvg's noise)."""
    private = [*USER_LEVEL, "fl.rounds=2"]
    run_job(make_job([*private, "algo=fedavg"]), tmp_path / "fedavg")
    run_job(make_job([*private, "algo=fednova"]), tmp_path / "fednova")
    fedavg, fednova = (read_rows(tmp_path / name) for name in ("fedavg", "fednova"))
    for avg, nova in zip(fedavg, fednova, strict=True):
        assert float(nova["test_loss"]) == pytest.approx(float(avg["test_loss"]), rel=1e-4)


@pytest.mark.parametrize(
    "privacy",
    [["selection=poisson", "privacy=dp_fedavg"], ["privacy=dp_sgd"]],
    ids=["dp_fedavg", "dp_sgd"],
)
def test_a_run_without_noise_says_it_guarantees_no_privacy(
    privacy: list[str], tmp_path: Path
) -> None:
    """Probe DP1/DP11: privacy.noise_multiplier=0 (clipping alone, an ablation) runs, and its
    first line says that it guarantees nothing, as its ε column (inf) does."""
    run_dir = tmp_path / "run"
    ran = run_cli(
        *TINY,
        "fl.rounds=1",
        *privacy,
        "privacy.noise_multiplier=0",
        f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
    )
    said = (
        "NO NOISE (privacy.noise_multiplier=0: clipping only, no privacy guarantee, epsilon = inf)"
    )
    assert said in ran.stdout + ran.stderr
    [row] = rows_without_timings(run_dir)
    assert math.isinf(float(row["epsilon"]))
