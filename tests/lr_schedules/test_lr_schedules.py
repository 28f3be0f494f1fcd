"""LR schedules (`lr_schedule=`): values at chosen rounds against hand arithmetic, each refusal
in one line naming its key, YAML defaults equal to the dataclasses', the `lr` column of a real run,
and the refusal of a resume that changes fl.rounds under a schedule that depends on it. The plateau
schedule against torch's ReduceLROnPlateau on the same metrics, in a real run (the CLI on two
workers, a killed and resumed run) and its refusal of a monitor the rows lack."""

import csv
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from fedlight.core.context import Federation, RoundContext
from fedlight.core.errors import ConfigError
from fedlight.core.messages import ClientUpload, LocalResult
from fedlight.core.tensors import StateDict
from fedlight.drivers.asynchronous import AsynchronousLoop
from fedlight.drivers.base import Driver
from fedlight.drivers.synchronous import FederatedLoop
from fedlight.loggers.base import MetricsRow
from fedlight.lr_schedules.base import LRSchedule
from fedlight.lr_schedules.cosine import Cosine
from fedlight.lr_schedules.cyclic import Cyclic
from fedlight.lr_schedules.cyclic_decay import CyclicDecay
from fedlight.lr_schedules.exponential import Exponential
from fedlight.lr_schedules.plateau import Plateau
from fedlight.lr_schedules.step import Step
from fedlight.runs.experiment import resumed_checkpoint, run_job
from fedlight.runs.job import Job
from fedlight.store.checkpoint import load_checkpoint
from tests.algorithms.test_algorithms import one_torch_thread  # noqa: F401 - autouse fixture
from tests.conftest import TINY, rows_without_timings, run_cli, run_killed_in_round

COS_09PI = -0.9510565162951535  # cos(0.9π) = −cos(18°)


def rates(schedule: LRSchedule, rounds: list[int], base_lr: float, total: int = 1000) -> list:
    federation = Federation(num_clients=10, trainable=frozenset(), rounds=total)
    return [schedule(federation.round(r), base_lr, ()) for r in rounds]


def test_cyclic_default_is_the_tutorials_base_to_twice_base_and_back() -> None:
    # L = 100: p = 0, 25, 50, 75, 0 (next cycle), 99
    got = rates(Cyclic(), [1, 26, 51, 76, 101, 100], base_lr=0.1)
    assert got == pytest.approx([0.1, 0.15, 0.2, 0.15, 0.1, 0.1 + 0.1 * 0.02])


def test_cyclic_min_max_is_smiths_triangle_whatever_the_base() -> None:
    # L = 10, half 5: p = 0, 2 (0.4 of the way up), 5 (top), 7 (0.6), 0
    got = rates(Cyclic(cycle_length=10, min_lr=0.01, max_lr=0.1), [1, 3, 6, 8, 11], base_lr=5.0)
    assert got == pytest.approx([0.01, 0.01 + 0.09 * 0.4, 0.1, 0.01 + 0.09 * 0.6, 0.01])


def test_cyclic_decay_is_the_tutorials_snippet_rising_then_decaying_to_about_zero() -> None:
    """§2.3's get_curr_lr: base·(1 + p/h) while p < h, then base·(2 − p/h). At L = 8 (h = 4) every
    rate is a dyadic number, so the comparison is exact: 1, 1.25, 1.5, 1.75 on the way up, back to
    1 at p = h, then 0.75, 0.5, 0.25 (base/h, the cycle's last round) and 1 again in round 9."""
    got = rates(CyclicDecay(cycle_length=8), list(range(1, 18)), base_lr=1.0)
    cycle = [1.0, 1.25, 1.5, 1.75, 1.0, 0.75, 0.5, 0.25]
    assert got == [*cycle, *cycle, 1.0]
    assert rates(CyclicDecay(cycle_length=8), [4, 8], base_lr=0.5) == [0.875, 0.125]


def test_cyclic_decay_default_is_the_tutorials_100_round_cycle() -> None:
    # L = 100, h = 50: p = 0, 25, 49 (the top, just under 2·base), 50 (base), 75, 99 (base/50), 0
    got = rates(CyclicDecay(), [1, 26, 50, 51, 76, 100, 101], base_lr=0.1)
    expected = [0.1, 0.15, 0.1 * 1.98, 0.1, 0.05, 0.1 * 0.02, 0.1]
    assert got == pytest.approx(expected, rel=1e-15)


def test_cyclic_and_cyclic_decay_put_every_round_at_the_same_place_of_the_same_cycle() -> None:
    """Both read p = (r − 1) mod L against h = L/2: at base 1 and L = 8 (dyadic rates, exact)
    they rise together while p < h, and after it the triangle is exactly base above the decay
    (3 − p/h against 2 − p/h); both start again at base in rounds 1 + L and 1 + 2L."""
    rounds = list(range(1, 18))
    cyclic = rates(Cyclic(cycle_length=8), rounds, base_lr=1.0)
    decay = rates(CyclicDecay(cycle_length=8), rounds, base_lr=1.0)
    for r, up_down, snippet in zip(rounds, cyclic, decay, strict=True):
        assert up_down == snippet + (0.0 if (r - 1) % 8 < 4 else 1.0)
    assert cyclic[0] == cyclic[8] == cyclic[16] == decay[0] == decay[8] == decay[16] == 1.0


def test_cyclic_decay_rates_in_metrics_csv(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """A real run's `lr` column: L = 4 over 4 rounds from optim.lr = 0.05, exact (dyadic
    factors 1, 1.5, 1, 0.5 of the same base)."""
    job = make_job([*TINY, "lr_schedule=cyclic_decay", "lr_schedule.cycle_length=4"])
    run_job(job, tmp_path)
    with (tmp_path / "metrics.csv").open() as f:
        lrs = [float(row["lr"]) for row in csv.DictReader(f)]
    assert lrs == [0.05, 0.05 * 1.5, 0.05, 0.05 * 0.5]


def test_cosine_without_warmup_first_middle_last() -> None:
    # T = 10: progress (r − 1)/10 = 0, 0.5, 0.9
    assert rates(Cosine(), [1, 6, 10], 0.1, total=10) == pytest.approx(
        [0.1, 0.05, 0.1 * (1 + COS_09PI) / 2]
    )
    assert rates(Cosine(min_lr=0.01), [6], 0.1, total=10) == pytest.approx([0.055])


def test_cosine_with_warmup_first_middle_last() -> None:
    # W = 2, T = 12: base·r/2 for r ≤ 2, then progress (r − 3)/10 = 0, 0.5, 0.9
    got = rates(Cosine(warmup_rounds=2, min_lr=0.01), [1, 2, 3, 8, 12], 0.1, total=12)
    assert got == pytest.approx([0.05, 0.1, 0.1, 0.055, 0.01 + 0.09 * (1 + COS_09PI) / 2])
    assert Cosine.depends_on_total_rounds and not Step.depends_on_total_rounds


def test_step_boundaries() -> None:
    got = rates(Step(gamma=0.5, step_rounds=3), [1, 3, 4, 6, 7], base_lr=0.1)
    assert got == pytest.approx([0.1, 0.1, 0.05, 0.05, 0.025])


def test_exponential() -> None:
    got = rates(Exponential(gamma=0.9), [1, 2, 3, 11], base_lr=0.1)
    assert got == pytest.approx([0.1, 0.09, 0.081, 0.1 * 0.9**10])


@pytest.mark.parametrize(
    ("make", "key"),
    [
        (lambda: Cyclic(cycle_length=1), "lr_schedule.cycle_length=1"),
        (lambda: Cyclic(min_lr=0.1), "lr_schedule.min_lr=0.1 needs lr_schedule.max_lr"),
        (lambda: Cyclic(max_lr=0.1), "lr_schedule.max_lr=0.1 needs lr_schedule.min_lr"),
        (lambda: Cyclic(min_lr=0.0, max_lr=0.1), "lr_schedule.min_lr=0.0"),
        (lambda: Cyclic(min_lr=0.2, max_lr=0.1), "lr_schedule.max_lr=0.1"),
        (lambda: CyclicDecay(cycle_length=1), "lr_schedule.cycle_length=1"),
        (lambda: Cosine(warmup_rounds=-1), "lr_schedule.warmup_rounds=-1"),
        (lambda: Cosine(min_lr=-0.1), "lr_schedule.min_lr=-0.1"),
        (lambda: Step(gamma=0), "lr_schedule.gamma=0"),
        (lambda: Step(gamma=1.5), "lr_schedule.gamma=1.5"),
        (lambda: Step(step_rounds=0), "lr_schedule.step_rounds=0"),
        (lambda: Exponential(gamma=0), "lr_schedule.gamma=0"),
        (lambda: Exponential(gamma=1.01), "lr_schedule.gamma=1.01"),
        (lambda: Plateau(mode="low"), "lr_schedule.mode=low"),
        (lambda: Plateau(factor=1.0), "lr_schedule.factor=1.0"),
        (lambda: Plateau(patience=-1), "lr_schedule.patience=-1"),
        (lambda: Plateau(threshold=-0.1), "lr_schedule.threshold=-0.1"),
        (lambda: Plateau(cooldown=-1), "lr_schedule.cooldown=-1"),
        (lambda: Plateau(min_lr=-0.1), "lr_schedule.min_lr=-0.1"),
    ],
)
def test_refusals_name_the_key_in_one_line(make: Callable[[], LRSchedule], key: str) -> None:
    with pytest.raises(ConfigError) as refused:
        make()
    assert str(refused.value).startswith(key) and "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("option", "schedule"),
    [
        ("cyclic", Cyclic()),
        ("cyclic_decay", CyclicDecay()),
        ("cosine", Cosine()),
        ("step", Step()),
        ("exponential", Exponential()),
        ("plateau", Plateau()),
    ],
)
def test_yaml_defaults_are_the_dataclass_defaults(
    make_job: Callable[[list[str]], Job], option: str, schedule: LRSchedule
) -> None:
    assert make_job([f"lr_schedule={option}"]).lr_schedule == schedule


def test_step_schedule_in_metrics_csv(make_job: Callable[[list[str]], Job], tmp_path: Path) -> None:
    step = ["lr_schedule=step", "lr_schedule.step_rounds=2", "lr_schedule.gamma=0.5"]
    job = make_job([*TINY, *step])
    assert job.settings.optim.lr == 0.05
    run_job(job, tmp_path)
    with (tmp_path / "metrics.csv").open() as f:
        lrs = [float(row["lr"]) for row in csv.DictReader(f)]
    assert lrs == pytest.approx([0.05, 0.05, 0.025, 0.025])


def test_resume_with_other_rounds_refused_only_where_the_schedule_depends_on_them(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    for option in ("cosine", "step"):
        overrides = [*TINY, f"lr_schedule={option}"]
        run_job(make_job([*overrides, "fl.rounds=2"]), tmp_path / option)
        resumed = make_job([*overrides, "fl.rounds=3", f"resume={tmp_path / option}"])
        if option == "cosine":
            with pytest.raises(ConfigError, match="depends on the total"):
                resumed_checkpoint(resumed)
        else:
            assert resumed_checkpoint(resumed) is not None


@pytest.mark.parametrize("algo", ["scaffold", "fednova"])
def test_scaffold_and_fednova_see_the_rate_of_each_round(
    make_job: Callable[[list[str]], Job], tmp_path: Path, algo: str
) -> None:
    """Their uploads are computed from the round's scheduled rate (SCAFFOLD's option II divides
    by it; FedNova's normalizer cancels it within a round), not from optim.lr."""
    job = make_job(
        [*TINY, f"algo={algo}", "fl.rounds=3", "lr_schedule=step", "lr_schedule.step_rounds=1"]
    )
    seen: list[tuple[int, float]] = []
    upload = job.algorithm.upload

    def recording_upload(
        ctx: RoundContext, received: StateDict, local: LocalResult, client_state: StateDict | None
    ) -> tuple[ClientUpload, StateDict | None]:
        seen.append((ctx.round_index, local.lr))
        return upload(ctx, received, local, client_state)

    job.algorithm.upload = recording_upload  # type: ignore[method-assign]
    run_job(job, tmp_path / "run")
    assert sorted(set(seen)) == [(1, 0.05), (2, 0.025), (3, 0.0125)]


# Plateau (torch's ReduceLROnPlateau per evaluation) ----------------------------------------------

# A loss that falls, flattens with noise, jumps (a NaN: never an improvement), falls again.
FALLING = [1 / (1 + k) for k in range(8)]
FLAT = [0.12 + 0.001 * ((7 * k) % 5) for k in range(20)]
METRICS = [*FALLING, *FLAT, math.nan, 0.2, *[0.1 - 0.002 * k for k in range(10)], *FLAT]
# A loss must halve to count as better: on digits every evaluation after the first is a bad one.
HALVING = {"patience": 0, "factor": 0.5, "threshold": 0.5}
PLATEAU = ["lr_schedule=plateau", *(f"lr_schedule.{k}={v}" for k, v in HALVING.items())]


def torch_rates(base_lrs: Sequence[float], metrics: Sequence[float], **settings: Any) -> list:
    """Each parameter group's rate before each `step(metric)` of torch's scheduler and after the
    last."""
    groups = [{"params": [torch.zeros(1, requires_grad=True)], "lr": lr} for lr in base_lrs]
    optimizer = torch.optim.SGD(groups)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, **settings)
    rates = [[g["lr"] for g in optimizer.param_groups]]
    for metric in metrics:
        scheduler.step(metric)
        rates.append([g["lr"] for g in optimizer.param_groups])
    return rates


def plateau_rates(schedule: Plateau, base_lrs: Sequence[float], rows: Sequence[MetricsRow]) -> list:
    """Each parameter group's rate in each round of a run whose evaluated rows are `rows`: round
    k + 1 has seen the first k."""
    ctx = Federation(num_clients=1, trainable=frozenset()).round(1)
    return [[schedule(ctx, lr, rows[:k]) for lr in base_lrs] for k in range(len(rows) + 1)]


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"patience": 2, "factor": 0.5},
        {"patience": 1, "cooldown": 2, "threshold": 0.01, "min_lr": 0.004},
        {"mode": "max", "patience": 0, "factor": 0.3, "threshold": 0.0},
        {"patience": 0, "factor": 0.5, "threshold": 0.2, "cooldown": 1},
    ],
)
def test_plateau_gives_torchs_reduce_lr_on_plateau_rates(settings: dict[str, Any]) -> None:
    """The same metrics to torch's scheduler (one step each) and to the plateau schedule (one
    evaluated row each): equal rates, to the bit, for every parameter group (the second so small
    that torch's eps stops its reductions)."""
    base_lrs = (0.1, 1e-7)
    rows: list[MetricsRow] = [{"round": k + 1, "test_loss": m} for k, m in enumerate(METRICS)]
    ours = plateau_rates(Plateau(**settings), base_lrs, rows)
    assert ours == torch_rates(base_lrs, METRICS, **settings)
    assert ours[-1][0] < 0.1  # it did reduce


def test_plateau_monitors_the_validation_loss_where_the_rows_have_it() -> None:
    """By default the validation loss where the run has a validation set, else the test loss;
    `monitor` names any column."""
    ctx = Federation(num_clients=1, trainable=frozenset()).round(3)
    both: list[MetricsRow] = [
        {"round": r, "test_loss": 1.0 + r, "val_loss": 1.0 - r / 10} for r in (1, 2)
    ]
    test_only: list[MetricsRow] = [{"round": r, "test_loss": 1.0 + r} for r in (1, 2)]
    assert Plateau(patience=0, factor=0.5)(ctx, 0.1, both) == 0.1  # val_loss fell
    assert Plateau(patience=0, factor=0.5)(ctx, 0.1, test_only) == 0.05
    assert Plateau(monitor="test_loss", patience=0, factor=0.5)(ctx, 0.1, both) == 0.05


def test_a_monitor_the_rows_lack_is_refused_in_one_line_naming_the_columns(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    job = make_job([*TINY, "fl.rounds=2", "lr_schedule=plateau", "lr_schedule.monitor=val_los"])
    with pytest.raises(ConfigError) as refused:
        run_job(job, tmp_path)
    message = str(refused.value)
    assert message.startswith(
        "lr_schedule.monitor=val_los is not a column of the evaluated rounds' rows (round 1 has "
        "round, test_accuracy, test_loss, train_loss, lr,"
    )
    assert "\n" not in message


def test_plateau_on_two_workers_steps_at_evaluated_rounds_as_on_one(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """The CLI on two workers, evaluations every 2 rounds on a validation set: the `lr` column is
    torch's scheduler stepped on the evaluated rows' val_loss (the rounds between count for
    nothing), and the numbers are one worker's (the second worker evaluates nothing: it trains
    its clients at the main worker's rate)."""
    overrides = [*TINY, *PLATEAU, "fl.rounds=6", "eval.every=2", "data.validation_fraction=0.2"]
    two = ["fl.workers=2", "fl.threads_per_worker=1", f"hydra.run.dir={tmp_path / 'two'}"]
    run_cli(*overrides, *two, cwd=tmp_path)
    run_job(make_job(overrides), tmp_path / "one")
    rows = rows_without_timings(tmp_path / "two")
    assert rows == rows_without_timings(tmp_path / "one")
    lrs = [float(row["lr"]) for row in rows]
    assert lrs == [0.05] * 4 + [0.025] * 2
    evaluated = [row for row in rows if row["val_loss"]]
    assert [row["round"] for row in evaluated] == ["2", "4", "6"]
    replayed = torch_rates([0.05], [float(row["val_loss"]) for row in evaluated], **HALVING)
    seen = [sum(int(e["round"]) < int(row["round"]) for e in evaluated) for row in rows]
    assert lrs == [replayed[k][0] for k in seen]


@pytest.mark.parametrize(
    ("algo", "driver"),
    [
        ([], FederatedLoop),
        (["algo=fedasync", "algo.concurrency=5", "system=lognormal"], AsynchronousLoop),
    ],
    ids=["synchronous", "fedasync"],
)
def test_a_killed_plateau_run_resumes_to_the_uninterrupted_rates_and_metrics(
    make_job: Callable[[list[str]], Job],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    algo: list[str],
    driver: type[Driver],
) -> None:
    """Killed in round 6 (the checkpoint of rounds 1-4 ends in a cooldown, one reduction made):
    the resumed run replays the schedule from the checkpoint's rows, so its rates, metrics and
    weights are the uninterrupted run's, on either driver."""
    settings = ["lr_schedule.patience=1", "lr_schedule.cooldown=1"]
    overrides = [*TINY, *PLATEAU, *settings, *algo, "fl.rounds=8", "checkpoint.every=2"]
    run_job(make_job(overrides), tmp_path / "full")
    run_killed_in_round(make_job(overrides), tmp_path / "killed", 6, monkeypatch, driver)
    assert load_checkpoint(tmp_path / "killed" / "checkpoint.pt")["completed_rounds"] == 4
    run_job(make_job([*overrides, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    full = rows_without_timings(tmp_path / "full")
    assert [float(r["lr"]) for r in full] == [0.05] * 3 + [0.025] * 3 + [0.0125] * 2
    assert rows_without_timings(tmp_path / "resumed") == full
    weights = [
        load_checkpoint(tmp_path / run / "checkpoint.pt")["server_weights"]
        for run in ("full", "resumed")
    ]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
