"""LR schedules (`lr_schedule=`): values at chosen rounds against hand arithmetic, each refusal
in one line naming its key, YAML defaults equal to the dataclasses', the `lr` column of a real run,
and the refusal of a resume that changes fl.rounds under a schedule that depends on it."""

import csv
from collections.abc import Callable
from pathlib import Path

import pytest

from fedlight.core.context import Federation, RoundContext
from fedlight.core.errors import ConfigError
from fedlight.core.messages import ClientUpload, LocalResult
from fedlight.core.tensors import StateDict
from fedlight.lr_schedules.base import LRSchedule
from fedlight.lr_schedules.cosine import Cosine
from fedlight.lr_schedules.cyclic import Cyclic
from fedlight.lr_schedules.exponential import Exponential
from fedlight.lr_schedules.step import Step
from fedlight.runs.experiment import Job, resumed_checkpoint, run_job

from .conftest import TINY
from .test_algorithms import one_torch_thread  # noqa: F401 - autouse fixture

COS_09PI = -0.9510565162951535  # cos(0.9π) = −cos(18°)


def rates(schedule: LRSchedule, rounds: list[int], base_lr: float, total: int = 1000) -> list:
    federation = Federation(num_clients=10, trainable=frozenset(), rounds=total)
    return [schedule(federation.round(r), base_lr) for r in rounds]


def test_cyclic_default_is_the_tutorials_base_to_twice_base_and_back() -> None:
    # L = 100: p = 0, 25, 50, 75, 0 (next cycle), 99
    got = rates(Cyclic(), [1, 26, 51, 76, 101, 100], base_lr=0.1)
    assert got == pytest.approx([0.1, 0.15, 0.2, 0.15, 0.1, 0.1 + 0.1 * 0.02])


def test_cyclic_min_max_is_smiths_triangle_whatever_the_base() -> None:
    # L = 10, half 5: p = 0, 2 (0.4 of the way up), 5 (top), 7 (0.6), 0
    got = rates(Cyclic(cycle_length=10, min_lr=0.01, max_lr=0.1), [1, 3, 6, 8, 11], base_lr=5.0)
    assert got == pytest.approx([0.01, 0.01 + 0.09 * 0.4, 0.1, 0.01 + 0.09 * 0.6, 0.01])


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
        (lambda: Cosine(warmup_rounds=-1), "lr_schedule.warmup_rounds=-1"),
        (lambda: Cosine(min_lr=-0.1), "lr_schedule.min_lr=-0.1"),
        (lambda: Step(gamma=0), "lr_schedule.gamma=0"),
        (lambda: Step(gamma=1.5), "lr_schedule.gamma=1.5"),
        (lambda: Step(step_rounds=0), "lr_schedule.step_rounds=0"),
        (lambda: Exponential(gamma=0), "lr_schedule.gamma=0"),
        (lambda: Exponential(gamma=1.01), "lr_schedule.gamma=1.01"),
    ],
)
def test_refusals_name_the_key_in_one_line(make: Callable[[], LRSchedule], key: str) -> None:
    with pytest.raises(ConfigError) as refused:
        make()
    assert str(refused.value).startswith(key) and "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("option", "schedule"),
    [("cyclic", Cyclic()), ("cosine", Cosine()), ("step", Step()), ("exponential", Exponential())],
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
