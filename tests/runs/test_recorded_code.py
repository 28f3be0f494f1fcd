"""Nothing read from a run, sweep or study directory names code to run (fedlight/runs/
recorded_code.py): an override planted in `.hydra/overrides.yaml` (`resume=<dir>`), in
multirun.yaml (`fedlight resume`) or in optimization_results.yaml's best parameters (`fedlight
tuned`) that would unpickle a planted file is refused in one line naming the file, and nothing
runs; the same override typed by the user is theirs. And a run recorded before fedlight's modules
moved resumes (its saved `_target_`s compare by their current paths)."""

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

from fedlight.cli import entry
from fedlight.core.errors import ConfigError
from fedlight.core.moved import MOVED
from fedlight.runs.recorded_code import code_named
from fedlight.runs.resume import resume_command
from fedlight.store.checkpoint import load_checkpoint, save_checkpoint
from fedlight.store.run_files import CHECKPOINT_NAME
from tests.conftest import TINY, rows_without_timings, run_cli
from tests.helpers.finished_runs import copy_of, finished_run, one_thread
from tests.runs.test_hardening import RunsCode, assert_one_line, cli_exit

RUN = [*TINY, "fl.rounds=2", "attack=sign_flip", "attack.fraction=0.2"]
ONE_ROUND = [*TINY, "fl.rounds=1"]


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread() -> Iterator[None]:
    yield from one_thread()


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 2-round run, made through the CLI."""
    return finished_run(tmp_path_factory, "recorded", RUN)


def planted(directory: Path, marker: Path) -> str:
    """An override that unpickles a file planted in `directory` (which touches `marker`):
    torch.load is on no blocklist of Hydra's."""
    torch.save(RunsCode(marker), directory / "notes.pkl")
    return f"+logger.notes={{_target_:torch.load,f:'{directory / 'notes.pkl'}',weights_only:false}}"


def test_resume_runs_no_code_planted_in_the_runs_overrides(
    finished: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    run = copy_of(finished, tmp_path)
    marker = tmp_path / "ran"
    recorded = run / ".hydra" / "overrides.yaml"
    overrides = yaml.safe_load(recorded.read_text())
    recorded.write_text(yaml.safe_dump([*overrides, planted(run, marker)]))
    code, err = cli_exit(
        [*RUN, "fl.rounds=3", f"resume={run}", f"hydra.run.dir={run}"], monkeypatch, capsys
    )
    assert not marker.exists()
    assert code == 2
    assert_one_line(
        err, rf"{recorded} records .*names code to run \(logger\.notes\._target_\).*yourself"
    )


def sweep_record(sweep: Path, task: list[str], own: list[str], algo: str = "fedavg") -> None:
    """multirun.yaml as Hydra writes it for a command with `task` and Hydra's `own` overrides."""
    sweep.mkdir(parents=True, exist_ok=True)
    hydra = {
        "mode": "MULTIRUN",
        "overrides": {"hydra": ["hydra.mode=MULTIRUN", *own], "task": task},
        "job": {"config_name": "config"},
        "runtime": {"choices": {"algo": algo}},
    }
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"hydra": hydra}))


def test_fedlight_resume_runs_no_code_planted_in_the_sweeps_record(tmp_path: Path) -> None:
    sweep, marker = tmp_path / "sweep", tmp_path / "ran"
    sweep.mkdir()
    sweep_record(sweep, [*ONE_ROUND, planted(sweep, marker)], [])
    result = run_cli("resume", str(sweep), cwd=tmp_path, check=False)
    assert not marker.exists()
    assert result.returncode == 2, result.stderr
    assert_one_line(
        result.stderr,
        rf"fedlight resume {sweep}: {sweep}/multirun.yaml records .*\(logger\.notes\._target_\)",
    )
    assert not (sweep / "0").exists()


def test_fedlight_tuned_runs_no_code_planted_in_the_best_parameters(tmp_path: Path) -> None:
    study, marker = tmp_path / "study", tmp_path / "ran"
    study.mkdir()
    searched = [*ONE_ROUND, "optim.lr=interval(0.01,0.1)"]
    sweep_record(study, searched, ["hydra/sweeper=optuna", "hydra.sweeper.n_trials=1"])
    key, value = planted(study, marker).split("=", 1)
    best = {"best_params": {"optim.lr": 0.05, key: value}, "best_value": 0.5}
    (study / "optimization_results.yaml").write_text(yaml.safe_dump(best))
    result = run_cli("tuned", str(study), cwd=tmp_path, check=False)
    assert not marker.exists()
    assert result.returncode == 2, result.stderr
    results = study / "optimization_results.yaml"
    assert_one_line(
        result.stderr, rf"fedlight tuned {study}: {results} records .*\(logger\.notes\._target_\)"
    )
    assert not (study / "tested").exists()


def test_an_override_the_user_gives_is_theirs_and_given_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep of the user's own module resumes when they give its `model._target_` themselves,
    and that override is not given twice (a sweep over it would run each job twice)."""
    sweep = tmp_path / "sweep"
    own = "model._target_=tests.helpers.user_module.RecordingModule"
    sweep_record(sweep, [*ONE_ROUND, own], ["hydra/launcher=joblib"])
    with pytest.raises(ConfigError, match=r"names code to run \(model\._target_\).*yourself"):
        resume_command(sweep)
    ran: list[list[str]] = []
    monkeypatch.setattr(entry, "run_cli", lambda: ran.append(sys.argv[1:]))
    assert entry.resume_main([str(sweep), own]) == 0
    assert ran[0].count(own) == 1 and ran[0].index(own) < ran[0].index("resume=auto")
    sweep_record(sweep, ONE_ROUND, ["hydra.job.env_set.LD_PRELOAD=/x/evil.so"])
    with pytest.raises(ConfigError, match=r"hydra\.job\.env_set\.LD_PRELOAD"):
        resume_command(sweep)
    for damaged in ({"a": 1}, "+x=${oc.decode:'{a: 1}'}"):
        sweep_record(sweep, [*ONE_ROUND, damaged], [])
        with pytest.raises(ConfigError, match=r"multirun\.yaml holds .*not an override Hydra"):
            resume_command(sweep)


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("+logger.x={_target_:torch.load,f:x}", "logger.x._target_"),
        ("+logger.x=[1,{a:{_target_:os.system}}]", "logger.x.a._target_"),
        ("+logger.x._target_=torch.load", "logger.x._target_"),
        ("+logger.x={_partial_:true,a:1}", "logger.x._partial_"),
        ("+logger.x={_call_:1}", "logger.x._call_"),
        ("+logger.x='{_target_: torch.load}'", "_target_"),
        ("""+logger.x='${oc.decode:"{a: 1}"}'""", "oc.decode"),
        ("data.datamodule=evil.DataModule", "data.datamodule"),
        ("+data={datamodule:evil.DataModule}", "data.datamodule"),
        ("partition.function=a.b,evil.split", "partition.function"),
        ("hydra.callbacks.x={a:1}", "hydra.callbacks.x"),
        ("hydra.launcher.setup=[touch x]", "hydra.launcher.setup"),
        ("hydra.job_logging.handlers.x.stream=y", "hydra.job_logging.handlers.x.stream"),
        ("optim.lr=0.1", None),
        ("seed=0,1,2", None),
        ("algo=glob(fed*)", None),
        ("optim.lr=interval(0.01,0.1)", None),
        ("model.lr=${optim.lr}", None),
        ("~logger", None),
        ("data.root=/data/my_target_files", None),
    ],
)
def test_what_names_code(override: str, named: str | None) -> None:
    assert code_named(OverridesParser.create().parse_override(override)) == named


def with_old_paths(config: object) -> object:
    """`config` as fedlight wrote it before its modules moved (`fedlight.core.moved`)."""
    if isinstance(config, dict):
        return {k: with_old_paths(v) for k, v in config.items()}
    if isinstance(config, list):
        return [with_old_paths(v) for v in config]
    if isinstance(config, str):
        for old, new in sorted(MOVED.items(), key=lambda item: -len(item[1])):
            if config.startswith(new + "."):
                return old + config[len(new) :]
    return config


@pytest.mark.parametrize("command", ["resume=<dir>", "fedlight resume"])
def test_a_run_recorded_before_the_modules_moved_resumes(
    finished: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    run = copy_of(finished, tmp_path)
    checkpoint = load_checkpoint(run / CHECKPOINT_NAME)
    saved = json.loads(checkpoint["config"])
    assert saved["attack"]["_target_"].startswith("fedlight.stages.attacks.")
    checkpoint["config"] = json.dumps(with_old_paths(saved), sort_keys=True)
    save_checkpoint(run / CHECKPOINT_NAME, checkpoint)
    summary = json.loads((run / "summary.json").read_text())
    summary["config"] = with_old_paths(summary["config"])
    (run / "summary.json").write_text(json.dumps(summary))
    if command == "fedlight resume":
        run_cli("resume", str(run), "fl.rounds=3", cwd=tmp_path)
    else:
        run_cli(*RUN, "fl.rounds=3", f"resume={run}", f"hydra.run.dir={run}", cwd=tmp_path)
    assert len(rows_without_timings(run)) == 3
