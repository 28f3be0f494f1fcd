"""`privacy=weight_noise`, the FedAvg tutorial's §4.2 noise: the std of the noise on the uploaded
weights by a chi-square bound that a correct mechanism fails with probability below e⁻⁴⁰, nothing
clipped (the upload plus exactly the (seed, round, client) generator's noise), buffers untouched,
and a real run through the CLI that says it guarantees nothing and reports no ε anywhere."""

import csv
import json
import math
from pathlib import Path

import pytest
import torch

from fedlight.algorithms.fedavg import FedAvg
from fedlight.algorithms.scaffold import Scaffold
from fedlight.core.context import Federation
from fedlight.core.errors import ConfigError
from fedlight.core.messages import ClientUpload
from fedlight.core.rng import Stream, derive_seed
from fedlight.stages.privacy.weight_noise import NO_GUARANTEE, WeightNoise
from tests.conftest import TINY, run_cli
from tests.helpers.commands import validate_command_line

FEDERATION = Federation(num_clients=10, trainable=frozenset({"w", "b"}), seed=7)
ENTRIES = 1_000_000
TAIL = 40.0  # x of Laurent and Massart's bounds: each fails with probability at most e^-x


def keys(tree: object, prefix: str = "") -> list[str]:
    """Every key of nested dicts, dotted."""
    if not isinstance(tree, dict):
        return []
    return [k for key, v in tree.items() for k in [prefix + key, *keys(v, f"{prefix}{key}.")]]


def noised(privacy: WeightNoise, upload: ClientUpload, round_index: int = 3) -> ClientUpload:
    ctx = FEDERATION.round(round_index, (upload.client_id,), (0.1,))
    return privacy.clip_upload(ctx, {}, FedAvg(), upload)[0]


def test_the_noise_on_each_weight_has_std_noise_std_by_a_chi_square_bound() -> None:
    """Σ (noise/σ)² over n entries is χ²_n for N(0, σ²) noise. Laurent and Massart (Annals of
    Statistics 2000, Lemma 1): P(χ²_n − n ≥ 2√(nx) + 2x) ≤ e⁻ˣ and P(n − χ²_n ≥ 2√(nx)) ≤ e⁻ˣ; at
    n = 10⁶ and x = 40 the band is ±1.3% of n, and a std off by 2% falls outside it whatever the
    draw. Float32 rounding of the noised zeros moves the sum by ~10⁻⁷ of itself."""
    sigma = 0.01
    upload = ClientUpload(4, 10, 3, {"w": torch.zeros(ENTRIES), "b": torch.zeros(1)})
    noise = noised(WeightNoise(noise_std=sigma), upload).tensors["w"].double()
    chi_square = float((noise / sigma).square().sum())
    low = ENTRIES - 2 * math.sqrt(ENTRIES * TAIL)
    high = ENTRIES + 2 * math.sqrt(ENTRIES * TAIL) + 2 * TAIL
    assert low <= chi_square <= high
    for wrong in (0.98 * sigma, 1.02 * sigma):  # the band tells a 2% error apart
        assert not low <= float((noise / wrong).square().sum()) <= high


def test_nothing_is_clipped_the_upload_gets_exactly_its_generators_noise() -> None:
    """An update of norm 10⁴ (any clip would shrink it) arrives as itself plus the noise drawn
    from the generator of (seed, PRIVACY, round, client), entry for entry; a buffer (not a
    trainable parameter) is left as it is; another client or round draws other noise."""
    huge = torch.full((100, 100), 100.0)
    buffer = torch.arange(5.0)
    upload = ClientUpload(2, 10, 3, {"w": huge, "b": torch.zeros(100), "running": buffer})
    privacy = WeightNoise(noise_std=0.1)
    sent = noised(privacy, upload, round_index=3).tensors
    generator = torch.Generator().manual_seed(derive_seed(7, Stream.PRIVACY, 3, 2))
    for key in ("w", "b"):  # the upload's key order
        drawn = torch.randn(upload.tensors[key].shape, generator=generator, dtype=torch.float64)
        assert torch.equal(sent[key], upload.tensors[key] + (drawn * 0.1).float())
    assert torch.equal(sent["running"], buffer)
    assert torch.equal(noised(privacy, upload, round_index=3).tensors["w"], sent["w"])
    other_client = ClientUpload(3, 10, 3, upload.tensors)
    assert not torch.equal(noised(privacy, other_client).tensors["w"], sent["w"])
    assert not torch.equal(noised(privacy, upload, round_index=4).tensors["w"], sent["w"])
    assert noised(WeightNoise(noise_std=0.0), upload).tensors is upload.tensors


def test_scaffold_gets_the_noise_on_its_model_update_not_on_its_control_variate() -> None:
    federation = Federation(num_clients=10, trainable=frozenset({"w"}))
    ctx = federation.round(1, (0,), (0.1,))
    upload = ClientUpload(0, 10, 3, {"delta_y/w": torch.zeros(50), "delta_c/w": torch.zeros(50)})
    sent = WeightNoise(noise_std=0.5).clip_upload(ctx, {}, Scaffold(), upload)[0].tensors
    assert not torch.equal(sent["delta_y/w"], upload.tensors["delta_y/w"])
    assert torch.equal(sent["delta_c/w"], upload.tensors["delta_c/w"])


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["privacy.noise_std=-0.1"], "privacy.noise_std=-0.1 must be >= 0; use e.g. 0.01"),
        (["algo=central"], "privacy=weight_noise noises the weights a client uploads, and"),
    ],
)
def test_refusals_are_one_line(args: list[str], expected: str) -> None:
    with pytest.raises(ConfigError) as refused:
        validate_command_line(["privacy=weight_noise", *args])
    assert str(refused.value).startswith(expected) and "\n" not in str(refused.value)


def test_a_run_says_it_guarantees_nothing_and_reports_no_epsilon(tmp_path: Path) -> None:
    """Two rounds through the CLI: the console's first word on privacy is that there is no
    guarantee; metrics.csv has the noise's std and no ε column; summary.json's privacy says so
    and none of its keys (the config's neither) names an ε."""
    run_dir = tmp_path / "run"
    ran = run_cli(
        *TINY,
        "fl.rounds=2",
        "privacy=weight_noise",
        "privacy.noise_std=0.001",
        f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
    )
    assert NO_GUARANTEE in ran.stderr
    with (run_dir / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [float(row["privacy.noise_std"]) for row in rows] == [0.001, 0.001]
    assert not any("epsilon" in column for column in rows[0])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["privacy"] == {"guarantee": NO_GUARANTEE, "noise_std": 0.001}
    assert not [key for key in keys(summary) if "epsilon" in key]
    assert math.isfinite(summary["final_accuracy"])
