"""W&B forced online without an answer (no network, no API key): a bounded wait, one line on stderr
naming the setting, offline logging, and a run that goes on; logger.wandb.init_timeout refusals."""

import csv
import json
import math
import re
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import wandb

from fedlight.core.errors import ConfigError
from fedlight.loggers import wandb as wandb_logger
from fedlight.loggers.base import RunInfo
from fedlight.loggers.wandb import WandbLogger
from fedlight.runs.experiment import run_job
from tests.conftest import TINY, run_killed_in_round
from tests.helpers.wandb_records import history_steps, run_ids


@pytest.fixture(autouse=True)
def no_earlier_online_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wandb_logger, "_online_failure", None)


class FakeRun:
    def __init__(self, sync_dir: Path) -> None:
        self.settings = SimpleNamespace(sync_dir=str(sync_dir))
        self.id = "fake"
        self.logged: list[tuple[int, dict[str, Any]]] = []
        self.artifacts: list[tuple[Any, list[str]]] = []
        self.summary: dict[str, Any] = {}
        self.finished = False

    def log(self, data: dict[str, Any], step: int | None = None) -> None:
        self.logged.append((step, data))

    def log_artifact(self, artifact: Any, aliases: list[str]) -> None:
        self.artifacts.append((artifact, aliases))

    def finish(self) -> None:
        self.finished = True


def fake_init(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, online: BaseException, delay: float = 0.0
) -> tuple[list[dict[str, Any]], list[FakeRun]]:
    """wandb.init that fails online (after `delay` s, as a timeout does) and works offline."""
    calls: list[dict[str, Any]] = []
    runs: list[FakeRun] = []

    def init(**kwargs: Any) -> FakeRun:
        calls.append(kwargs)
        if kwargs["mode"] == "online":
            time.sleep(delay)
            raise online
        runs.append(FakeRun(tmp_path / "wandb" / "offline-run-x"))
        return runs[-1]

    monkeypatch.setattr(wandb, "init", init)
    return calls, runs


def fedlight_lines(err: str) -> list[str]:
    assert "Traceback" not in err
    return [line for line in err.splitlines() if line.startswith("fedlight:")]


def run_info(tmp_path: Path) -> RunInfo:
    return RunInfo(tmp_path, {}, {"algo": "fedavg"}, None, 2)


def test_an_online_start_that_times_out_logs_offline_and_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(wandb_logger, "has_api_key", lambda: True)
    calls, runs = fake_init(monkeypatch, tmp_path, wandb.Error("Timed out\nmore"), delay=0.06)
    logger = WandbLogger(mode="online", init_timeout=0.05)
    logger.start(run_info(tmp_path))
    assert [c["mode"] for c in calls] == ["online", "offline"]
    assert calls[0]["settings"].init_timeout == 0.05
    [line] = fedlight_lines(capsys.readouterr().err)
    where = tmp_path / "wandb" / "offline-run-x"
    assert line.startswith("fedlight: W&B did not answer within 0.05 s; logging offline to ")
    assert f"offline to {where} " in line
    assert f"wandb sync {where}" in line and "logger.wandb.mode=offline" in line
    assert "logger.wandb.init_timeout" in line

    logger.log_round({"round": 1, "test_accuracy": 0.5})
    logger.finish({"best_accuracy": 0.5})
    [run] = runs
    assert run.logged == [(1, {"test_accuracy": 0.5})]
    assert run.summary == {"best_accuracy": 0.5} and run.finished


def test_the_next_job_of_the_process_does_not_wait_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(wandb_logger, "has_api_key", lambda: True)
    calls, _ = fake_init(monkeypatch, tmp_path, wandb.Error("Timed out"), delay=0.06)
    for _ in range(2):  # two jobs of a sweep
        WandbLogger(mode="online", init_timeout=0.05).start(run_info(tmp_path))
    assert [c["mode"] for c in calls] == ["online", "offline", "offline"]
    first, second = fedlight_lines(capsys.readouterr().err)
    assert "did not answer within 0.05 s; logging offline" in first
    assert "did not answer within 0.05 s for an earlier job; logging offline" in second


def test_an_online_start_refused_at_once_names_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(wandb_logger, "has_api_key", lambda: True)
    calls, _ = fake_init(monkeypatch, tmp_path, wandb.Error("invalid API key\ndetails"))
    WandbLogger(mode="online", init_timeout=5).start(run_info(tmp_path))
    assert [c["mode"] for c in calls] == ["online", "offline"]
    [line] = fedlight_lines(capsys.readouterr().err)
    assert "W&B could not start online (invalid API key); logging offline to" in line


def test_online_without_an_api_key_goes_offline_without_prompting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "config"))
    assert not wandb_logger.has_api_key()
    monkeypatch.setattr(wandb_logger, "has_api_key", lambda: False)
    calls, _ = fake_init(monkeypatch, tmp_path, AssertionError("online must not be tried"))
    WandbLogger(mode="online").start(run_info(tmp_path))
    assert [c["mode"] for c in calls] == ["offline"]  # wandb.init(mode="online") would prompt
    [line] = fedlight_lines(capsys.readouterr().err)
    assert line.startswith("fedlight: W&B has no API key; logging offline to")
    assert "WANDB_API_KEY" in line and "logger.wandb.mode=offline" in line


def test_when_offline_fails_too_wandb_is_disabled_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(wandb_logger, "has_api_key", lambda: True)

    def init(**kwargs: Any) -> None:
        raise OSError("disk full\nmore")

    monkeypatch.setattr(wandb, "init", init)
    logger = WandbLogger(mode="online")
    logger.start(run_info(tmp_path))
    logger.log_round({"round": 1, "test_accuracy": 0.5})
    logger.finish({})
    [line] = fedlight_lines(capsys.readouterr().err)
    assert "offline failed (disk full); W&B logging disabled" in line


def test_a_run_whose_wandb_does_not_answer_finishes_with_its_metrics(
    make_job, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(wandb_logger, "has_api_key", lambda: True)
    _, runs = fake_init(monkeypatch, tmp_path, wandb.Error("timed out"), delay=0.06)
    overrides = ["logger=wandb", "logger.wandb.mode=online", "logger.wandb.init_timeout=0.05"]
    small = ["fl.rounds=2", "fl.num_clients=4", "fl.clients_per_round=2", "local.batch_size=64"]
    run_job(make_job([*TINY, *small, "checkpoint.every=10", *overrides]), tmp_path / "run")
    [line] = [x for x in fedlight_lines(capsys.readouterr().err) if "W&B" in x]
    assert "did not answer within 0.05 s; logging offline" in line
    with (tmp_path / "run" / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["round"]) for r in rows] == [1, 2]
    [run] = runs
    # each round's metrics, then its clients table; None: the figures
    assert [step for step, _ in run.logged] == [1, 1, 2, 2, None] and run.finished
    assert [list(data) for _, data in run.logged][1:4:2] == [["clients"], ["clients"]]
    [(model, aliases)] = run.artifacts
    assert (model.name, model.type, aliases) == ("model-fake", "model", ["final"])


@pytest.mark.parametrize("value", [0, -1, math.inf, -math.inf, math.nan, "abc", None, True])
def test_init_timeout_must_be_a_finite_positive_number(value: Any) -> None:
    with pytest.raises(ConfigError, match=r"^logger\.wandb\.init_timeout=\S+ must be a finite"):
        WandbLogger(init_timeout=value)


def test_config_default_and_refusals(make_job) -> None:
    [_, logger] = make_job(["logger=wandb"]).loggers
    assert logger.init_timeout == 5
    with pytest.raises(ConfigError, match=r"logger\.wandb\.init_timeout=0 must be"):
        make_job(["logger=wandb", "logger.wandb.init_timeout=0"])
    with pytest.raises(ConfigError, match=r"logger\.wandb\.mode=bogus is not an option"):
        make_job(["logger=wandb", "logger.wandb.mode=bogus"])


def test_a_killed_and_resumed_run_continues_its_wandb_run(
    make_job: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed in round 3 and resumed: both sessions log to one W&B run, the id the run kept in its
    directory (offline, two parts of it: `wandb sync` uploads them in order into that run); the
    resumed part holds every round, as the killed session may have flushed none."""
    monkeypatch.delenv("WANDB_DIR", raising=False)
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))
    overrides = [*TINY, "logger=[csv,wandb]", "logger.wandb.mode=offline"]
    overrides += ["logger.wandb.log_model=false", "logger.wandb.clients=off"]
    run_dir = tmp_path / "run"
    run_killed_in_round(make_job(overrides), run_dir, 3, monkeypatch)
    [killed] = (run_dir / "wandb").glob("offline-run-*")
    run_job(make_job([*overrides, f"resume={run_dir}"]), run_dir)
    wandb.teardown()  # what process exit does: wait until the W&B service has written everything
    [resumed] = set((run_dir / "wandb").glob("offline-run-*")) - {killed}
    [killed_log], [resumed_log] = (list(part.glob("run-*.wandb")) for part in (killed, resumed))
    assert run_ids(killed_log) == run_ids(resumed_log)
    [kept] = run_ids(resumed_log)
    # W&B names a part offline-run-<time>-<id>, adding -<n> when a part started in the same second
    assert re.fullmatch(rf"offline-run-\d{{8}}_\d{{6}}-{kept}(-\d+)?", resumed.name)
    assert resumed_log.name == f"run-{kept}.wandb"
    assert history_steps(resumed_log) == [1, 2, 3, 4]
    assert json.loads((run_dir / wandb_logger.RUN_ID_FILE).read_text()) == {"id": kept}


def test_a_run_that_is_not_resumed_starts_a_new_wandb_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kept id is used only by a run that resumes its directory (`overwrite=true` or a new
    run in it starts afresh); a planted id that is not a W&B run id is not used."""
    calls, _ = fake_init(monkeypatch, tmp_path, RuntimeError("unused"))
    kept = tmp_path / wandb_logger.RUN_ID_FILE
    for text, resumed in [("abc123", False), ("abc123", True), ("../x y", True), ("", True)]:
        kept.write_text(json.dumps({"id": text}))
        run = run_info(tmp_path)
        WandbLogger(mode="offline").start(replace(run, resumed_from=tmp_path) if resumed else run)
        assert json.loads(kept.read_text()) == {"id": "fake"}  # the W&B run this one logs to
    assert [(call.get("id"), call.get("resume")) for call in calls] == [
        (None, None),
        ("abc123", "allow"),
        (None, None),
        (None, None),
    ]


def test_online_a_resumed_run_logs_only_the_rounds_wandb_does_not_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """W&B drops (with a warning each) a step below the one it continues from."""
    run = FakeRun(tmp_path)
    run.starting_step = 3
    monkeypatch.setattr(wandb, "init", lambda **kwargs: run)
    logger = WandbLogger(mode="offline")
    logger.start(replace(run_info(tmp_path), resumed_from=tmp_path))
    for round_index in (1, 2, 3, 4):
        logger.log_round({"round": round_index, "train_loss": 1.0})
        logger.log_clients(round_index, [{"client": 0, "train_loss": 1.0}])
    assert sorted({step for step, _ in run.logged}) == [3, 4]
