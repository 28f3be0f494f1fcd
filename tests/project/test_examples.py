"""The how-to guides' examples (docs/howto/, examples/): each runs two rounds on the digits, its
option YAMLs found on Hydra's search path as the guide's command finds them, and the test checks
that its component did what the guide says. One runs through the CLI (the guide's command); the
others run in this process, which imports torch once for all of them."""

import csv
import json
import math
import subprocess
import sys
from collections.abc import Iterator
from importlib import import_module
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import fedlight
from fedlight.cli import schema
from fedlight.core.errors import ConfigError
from fedlight.core.rng import Stream, numpy_generator
from fedlight.data.digits import Digits
from fedlight.models.mlp import MLP
from fedlight.runs.experiment import run_job
from tests.conftest import REPO, TINY, rows_without_timings, run_cli, without_timings

EXAMPLES = REPO / "examples"
TWO_ROUNDS = [*(o for o in TINY if not o.startswith("fl.rounds=")), "fl.rounds=2"]


def search_path(example: str) -> str:
    return f"hydra.searchpath=[file://{EXAMPLES / example / 'conf'}]"


def metrics(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def run_two_rounds(make_job, run_dir: Path, *overrides: str) -> list[dict[str, str]]:
    """Two rounds of the tiny digits setting; metrics.csv's rows."""
    run_job(make_job([*TWO_ROUNDS, *overrides]), run_dir)
    rows = metrics(run_dir)
    assert [row["round"] for row in rows] == ["1", "2"]
    return rows


def summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


# ------------------------------------------------------------------ the public API


def test_the_public_api_imports_on_first_use() -> None:
    assert fedlight.__all__ == sorted(fedlight.PUBLIC)
    for name, module in fedlight.PUBLIC.items():
        assert getattr(fedlight, name) is getattr(import_module(module), name)
    from fedlight import Algorithm, UploadStage

    assert Algorithm.__module__ == "fedlight.algorithms.base"
    assert UploadStage.__module__ == "fedlight.stages.base"
    with pytest.raises(AttributeError, match="has no attribute 'Algorithms'"):
        _ = fedlight.Algorithms
    probe = "import sys, fedlight; print(sorted(m for m in sys.modules if m.startswith('torch')))"
    alone = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert alone.stdout.strip() == "[]", alone.stderr


# ------------------------------------------------------------------ add-algorithm


def test_fedavg_with_momentum_from_scratch_gives_fedavgms_numbers(make_job, tmp_path: Path) -> None:
    """The guide's command through the CLI, against the built-in FedAvgM in this process (one
    worker each, the same threads)."""
    run = tmp_path / "example"
    command = ["--config-dir", "examples/fedavg_momentum/conf", "algo=fedavg_momentum"]
    run_cli(*command, *TWO_ROUNDS, "fl.workers=1", f"hydra.run.dir={run}", cwd=REPO)
    assert summary(run)["algo"] == "fedavg_momentum"
    reference = tmp_path / "fedavgm"
    run_two_rounds(make_job, reference, "algo=fedavgm")
    assert rows_without_timings(run) == rows_without_timings(reference)


# ------------------------------------------------------------------ add-aggregator


def test_centered_clipping_resists_an_outlier_and_runs(make_job, tmp_path: Path) -> None:
    from examples.centered_clip.aggregator import CenteredClip

    honest = 1.0 + 0.01 * torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    updates = torch.cat([honest, torch.full((1, 3), 1000.0)])
    combined = CenteredClip(tau=0.5, iterations=3).combine(updates, torch.ones(5))
    # the outlier moves the centre by at most τ/n per iteration (the mean: by about 200)
    assert (combined - honest.mean(dim=0)).abs().max() < 3 * 0.5 / 5

    run_two_rounds(make_job, tmp_path, search_path("centered_clip"), "aggregator=centered_clip")
    assert summary(tmp_path)["aggregator"] == "centered_clip"


# ------------------------------------------------------------------ add-codec


def test_terngrad_is_unbiased_and_its_bytes_are_counted_exactly(make_job, tmp_path: Path) -> None:
    from examples.terngrad.codec import TernGrad

    codec, generator = TernGrad(), torch.Generator().manual_seed(0)
    v = torch.randn(200)
    copies = v.repeat(2000, 1)  # one tensor of 2000 rows v: the same scale, independent levels
    decoded = codec.dequantize(codec.quantize(copies, generator))
    assert set(decoded.div(v.abs().max()).unique().tolist()) == {-1.0, 0.0, 1.0}
    assert (decoded.mean(dim=0) - v).abs().max() < 0.15  # E[decoded] = v

    rows = run_two_rounds(make_job, tmp_path, search_path("terngrad"), "upload=[terngrad]")
    model = MLP((1, 8, 8), 10, lr=0.05)  # digits' model: 2 bits an entry, a scale, a shape
    per_upload = sum(
        math.ceil(t.numel() / 4) + 4 + 4 * t.dim() for t in model.state_dict().values()
    )
    assert [int(row["bytes_up"]) for row in rows] == [4 * per_upload] * 2
    assert all(float(row["compression.terngrad.sq_error"]) > 0 for row in rows)


# ------------------------------------------------------------------ add-dataset


def test_writer_digits_gives_one_client_per_writer(make_job, tmp_path: Path) -> None:
    from examples.writer_digits.dataset import WRITERS, WriterDigits

    overrides = ["data=writer_digits", "partition=natural", "fl.num_clients=null"]
    rows = run_two_rounds(make_job, tmp_path, search_path("writer_digits"), *overrides)
    assert summary(tmp_path)["config"]["fl"]["num_clients"] == WRITERS
    assert [row["participants"] for row in rows] == ["4.0", "4.0"]
    # client i holds the examples of the i-th writer in sorted order
    histogram = json.loads((tmp_path / "label_histogram.json").read_text())
    names, sizes = np.unique(WriterDigits(train=True).writers, return_counts=True)
    assert len(names) == WRITERS
    assert [sum(histogram[str(client)]) for client in range(WRITERS)] == sizes.tolist()


def test_quantity_skew_is_the_functions_split_from_the_seeds_generator(
    make_job, tmp_path: Path
) -> None:
    from examples.quantity_skew.split import quantity_skew

    function = "partition.function=examples.quantity_skew.split.quantity_skew"
    labels = Digits().load().train_y.numpy()
    expected = quantity_skew(labels, 10, numpy_generator(0, Stream.PARTITION))  # seed 0
    run_two_rounds(make_job, tmp_path, "partition=callable", function)
    histogram = json.loads((tmp_path / "label_histogram.json").read_text())
    sizes = [sum(histogram[str(client)]) for client in range(10)]
    assert sizes == [len(indices) for indices in expected]
    assert sum(sizes) == len(labels) and max(sizes) > 3 * min(sizes)  # skewed, none lost


# ------------------------------------------------------------------ add-stage

STAGE = "update_norm"
ENTRY_POINT = "examples.update_norm.stage:UpdateNormStage"


@pytest.fixture
def update_norm_registered() -> Iterator[None]:
    """What the entry point of docs/howto/add-stage.md registers, in this process only: the
    kind, first in the chain (before secure aggregation, which masks the uploads), a group of
    the schema; the installed packages' kinds again afterwards."""
    schema.register_stage_kinds({STAGE: ENTRY_POINT})
    schema.register_schema()
    yield
    schema.register_stage_kinds()
    schema.register_schema()


@pytest.mark.usefixtures("update_norm_registered")
def test_the_update_norm_stage_reports_clips_and_pays_its_bytes(make_job, tmp_path: Path) -> None:
    assert list(schema.CHAINED_GROUPS) == [STAGE, "secure_aggregation"]
    overrides = ["+update_norm=log", "update_norm.max_norm=0.001"]
    rows = run_two_rounds(make_job, tmp_path, search_path("update_norm"), *overrides)
    assert summary(tmp_path)[STAGE] == "log"
    model_bytes = 4 * sum(t.numel() for t in MLP((1, 8, 8), 10, lr=0.05).parameters())
    for row in rows:
        # the norms are reported before clipping: every update was longer than 0.001
        assert float(row["update_norm.max"]) >= float(row["update_norm.mean"]) > 0.001
        assert row["update_norm.clipped"] == "1.0"
        assert int(row["bytes_up"]) == 4 * (model_bytes + 4)  # each client's norm: 4 bytes
    # clipped to 0.001, the model hardly moves (unclipped, round 2's test loss is 0.09 lower)
    assert abs(float(rows[1]["test_loss"]) - float(rows[0]["test_loss"])) < 0.005


@pytest.mark.usefixtures("update_norm_registered")
def test_a_plugged_in_kind_without_an_option_runs_its_default_and_changes_nothing(
    make_job, tmp_path: Path
) -> None:
    rows = run_two_rounds(make_job, tmp_path / "plugged")
    assert summary(tmp_path / "plugged")[STAGE] == "none"
    assert not any(column.startswith(STAGE) for column in rows[0])
    schema.register_stage_kinds()
    schema.register_schema()
    alone = run_two_rounds(make_job, tmp_path / "alone")
    assert without_timings(rows) == without_timings(alone)


def test_a_kind_that_clashes_or_is_no_stage_is_refused(make_job) -> None:
    with pytest.raises(ConfigError, match="named like fedlight's own privacy; rename"):
        schema.register_stage_kinds({"privacy": ENTRY_POINT})
    schema.register_stage_kinds({"norms": ENTRY_POINT})  # its class is named update_norm
    schema.register_schema()
    try:
        with pytest.raises(ConfigError, match="no UploadStage named 'norms'"):
            make_job(TWO_ROUNDS)
    finally:
        schema.register_stage_kinds()
        schema.register_schema()


def installed(site: Path, kinds: dict[str, str]) -> Path:
    """A distribution in `site` whose metadata declares `kinds` as fedlight stage kinds (what
    `pip install` writes from a pyproject.toml's entry points)."""
    info = site / "stage_kinds_example-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: stage-kinds-example\nVersion: 1.0\n"
    )
    lines = "".join(f"{kind} = {target}\n" for kind, target in kinds.items())
    (info / "entry_points.txt").write_text(f"[fedlight.stage_kinds]\n{lines}")
    return site


def test_a_packages_entry_point_plugs_the_kind_into_the_cli(tmp_path: Path, monkeypatch) -> None:
    """The guide's one registry line, as an installed package declares it."""
    monkeypatch.setenv("PYTHONPATH", str(installed(tmp_path / "site", {STAGE: ENTRY_POINT})))
    run_dir = tmp_path / "run"
    # its YAMLs found in conf/update_norm/ beside the module (hydra_plugins.fedlight_stage_kinds)
    run_cli(*TWO_ROUNDS, "+update_norm=log", f"hydra.run.dir={run_dir}", cwd=REPO, fresh=True)
    assert summary(run_dir)[STAGE] == "log"
    assert all(float(row["update_norm.mean"]) > 0 for row in metrics(run_dir))
    # fedlight's defaults list has no entry for the group: without the `+`, the fix is named
    elsewhere = f"hydra.run.dir={tmp_path / 'refused'}"
    refused = run_cli("update_norm=log", elsewhere, cwd=REPO, check=False, fresh=True)
    assert refused.returncode == 2
    assert "choose its option with a +: +update_norm=log" in refused.stderr.splitlines()[-1]
    # a package's kind named like fedlight's own group: refused as fedlight starts, in one line
    monkeypatch.setenv("PYTHONPATH", str(installed(tmp_path / "clash", {"privacy": ENTRY_POINT})))
    clash = run_cli(*TWO_ROUNDS, elsewhere, cwd=REPO, check=False, fresh=True)
    assert clash.returncode == 2
    assert clash.stderr.strip().splitlines() == [
        f"fedlight: error: the stage kind privacy ({ENTRY_POINT}, entry point of "
        "fedlight.stage_kinds) is named like fedlight's own privacy; rename it in its "
        "package's pyproject.toml"
    ]


# ------------------------------------------------------------------ own-model


def test_a_module_of_ones_own_logs_and_evaluates_itself(make_job, tmp_path: Path) -> None:
    from examples.digits_cnn.model import DigitsCNN

    rows = run_two_rounds(make_job, tmp_path, search_path("digits_cnn"), "model=digits_cnn")
    for row in rows:
        assert 0 <= float(row["train_acc"]) <= 1 and 0 <= float(row["test_f1"]) <= 1
    assert summary(tmp_path)["model"] == "digits_cnn"
    restored = DigitsCNN.load_from_checkpoint(tmp_path / "model.ckpt")
    assert restored.head.out_features == 10
