"""What the per-client rows (W&B's clients table, TensorBoard's client histograms) may publish
(issue 62): under secure aggregation nothing of one client of a masked round, in any file of the
run directory; under DP only what docs/configuration.md's "What a private run releases" names.

The participants' own numbers (training loss, update norm, logged values) are recorded as they
leave local training, then searched for, as the loggers write numbers (decimal text, float64
bytes), in every file the run wrote: W&B's offline run log and tables, TensorBoard's event files,
metrics.csv, console.log, the checkpoint. The same search over the run without secure
aggregation finds them, so a search that finds nothing means something.
"""

import math
import re
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from fedlight.core.context import RoundContext
from fedlight.core.messages import LocalResult
from fedlight.drivers.synchronous import FederatedLoop, Outcome
from fedlight.loggers.clients import logged_means, update_norm
from fedlight.round.client import Received
from fedlight.round.server import ServerRound
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from tests.conftest import REPO, TINY, rows_without_timings, run_cli
from tests.loggers.test_client_logging import client_table, events

# Two of three clients must deliver (t = 2): the dropouts refuse some rounds and not others.
RUN = [
    *TINY,
    "fl.rounds=4",
    "fl.clients_per_round=3",
    "system=tiers",
    "system.dropout=0.4",
    "model._target_=tests.helpers.lightning_modules.MetricsModule",
    "logger=[csv,wandb,tensorboard]",
    "logger.wandb.mode=offline",
]


def written_forms(value: float) -> list[bytes]:
    """`value` as a logger may write it: its shortest decimal text (JSON, CSV), that of its
    float32 rounding, and its float64 bytes (TensorBoard's histogram bounds)."""
    return [repr(value).encode(), repr(float(np.float32(value))).encode(), struct.pack("<d", value)]


def found_in(run_dir: Path, values: list[float]) -> dict[str, set[float]]:
    """Each file of `run_dir` (relative name) that holds one of `values`, with those it holds."""
    found: dict[str, set[float]] = {}
    for path in sorted(p for p in run_dir.rglob("*") if p.is_file() and not p.is_symlink()):
        content = path.read_bytes()
        held = {v for v in values if any(form in content for form in written_forms(v))}
        if held:
            found[str(path.relative_to(run_dir))] = held
    return found


def recorded_run(
    make_job: Callable[[list[str]], Job],
    run_dir: Path,
    overrides: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> list[float]:
    """Run in this process, recording each participant's loss, update norm and logged means as
    its local training returns them; the distinctive ones (not round numbers such as the
    module's constant 1.0)."""
    values: list[float] = []
    deliver = FederatedLoop.deliver

    def recording(
        self: FederatedLoop,
        ctx: RoundContext,
        got: Received,
        local: LocalResult,
        seconds: float,
        server: ServerRound | None,
    ) -> Outcome:
        values.extend([local.train_loss, update_norm(local.weights, got.task.start)])
        values.extend(logged_means(local.logged).values())
        return deliver(self, ctx, got, local, seconds, server)

    monkeypatch.delenv("WANDB_DIR", raising=False)  # W&B writes into the run directory
    monkeypatch.setenv("WANDB_DATA_DIR", str(run_dir.parent / "wandb-data"))
    with monkeypatch.context() as patch:
        patch.setattr(FederatedLoop, "deliver", recording)
        run_job(make_job(overrides), run_dir)
    return [v for v in values if math.isfinite(v) and v != round(v, 4)]


def test_secure_aggregation_leaves_no_clients_numbers_in_any_file(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = recorded_run(make_job, tmp_path / "plain", RUN, monkeypatch)
    found = found_in(tmp_path / "plain", plain)
    table_parts = [name for name in found if "/media/table/clients_" in name]
    assert table_parts and any("tfevents" in name for name in found)
    assert set().union(*found.values()) == set(plain)  # the search finds every client's numbers

    masked_dir = tmp_path / "masked"
    masked = recorded_run(make_job, masked_dir, [*RUN, "secure_aggregation=pairwise"], monkeypatch)
    rows = rows_without_timings(masked_dir)
    refused = [row for row in rows if row["aggregation_refused"] == "1.0"]
    assert any(row["participants"] == "1.0" for row in refused)  # one client trained, and ...
    assert any(row["train_loss"] != "nan" for row in rows)  # ... rounds that were unmasked
    trained = sum(int(float(row["participants"])) for row in rows)
    assert len(masked) >= 2 * trained  # a loss and a norm per participant, logged values
    assert found_in(masked_dir, masked) == {}
    assert not list(masked_dir.rglob("clients_*.table.json"))
    assert events(masked_dir).Tags()["histograms"] == []


def section(markdown: str, title: str) -> str:
    """The text of `## title` up to the next heading of its level."""
    start = markdown.index(f"\n## {title}\n")
    end = markdown.find("\n## ", start + 1)
    return markdown[start : end if end >= 0 else None]


@pytest.mark.parametrize(
    "privacy",
    [
        ["privacy=dp_fedavg", "selection=poisson"],
        ["privacy=dp_sgd", "privacy.noise_multiplier=1.0"],
    ],
    ids=["dp_fedavg", "dp_sgd"],
)
def test_what_a_private_run_logs_per_client_is_in_the_docs_list(
    privacy: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every column of the clients table and every client histogram of a private run is named
    in "What a private run releases", with the two settings that turn them off."""
    monkeypatch.delenv("WANDB_DIR", raising=False)
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))
    run_dir = tmp_path / "run"
    args = [*TINY, "fl.rounds=2", "logger=[csv,wandb,tensorboard]", "logger.wandb.mode=offline"]
    run_cli(*args, *privacy, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    columns, rows = client_table(run_dir)
    histograms = [tag.removeprefix("clients/") for tag in events(run_dir).Tags()["histograms"]]
    assert rows and histograms
    docs = (REPO / "docs" / "configuration.md").read_text()
    released = section(docs, "What a private run releases")
    named = set(re.findall(r"`([^`]+)`", released))
    assert {"logger.wandb.clients=off", "logger.tensorboard.client_histograms=false"} <= named
    assert set(columns) - {"round"} <= named
    assert set(histograms) <= named
