"""Hydra's own way: search paths, other sweepers, the objective, --list-jobs, --version, the job
name, and runs that say where they are (run directory, settings, console.log, resume= alone)."""

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import fedlight
from fedlight.core.errors import ConfigError
from fedlight.loggers.wandb import choice_tag
from tests.conftest import REPO, TINY, rows_without_timings, run_cli
from tests.data.test_data import write_mnist_tree
from tests.helpers.commands import validate_command_line

SMALL = [o for o in TINY if not o.startswith("fl.rounds=")]


def user_configs(root: Path) -> Path:
    """A folder of one's own configs: an algo option that lives outside the package."""
    (root / "algo").mkdir(parents=True)
    (root / "algo" / "my_fedprox.yaml").write_text("defaults:\n  - fedprox\n\nmu: 0.25\n")
    return root


def test_an_option_from_the_search_path_composes_and_runs(tmp_path: Path) -> None:
    configs = user_configs(tmp_path / "configs")
    search = f"hydra.searchpath=[file://{configs}]"
    assert validate_command_line([search, "algo=my_fedprox"]) == [[search, "algo=my_fedprox"]]
    with pytest.raises(ConfigError, match=r"algo=bogus is not an option; .*my_fedprox"):
        validate_command_line([search, "algo=bogus"])
    run = tmp_path / "run"
    run_cli(search, "algo=my_fedprox", *SMALL, "fl.rounds=1", f"hydra.run.dir={run}", cwd=tmp_path)
    config = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
    assert config["algo"]["mu"] == 0.25
    summary = json.loads((run / "summary.json").read_text())
    assert summary["algo"] == "my_fedprox"


def test_an_optuna_sweep_is_checked_at_every_value_it_can_name() -> None:
    """Each value the sweeper can choose from is checked before the study starts: both ends of
    an interval, each option of a choice (the study itself: tests/runs/test_optuna_sweeper.py)."""
    sweep = [
        "-m",
        "hydra/sweeper=optuna",
        "hydra.sweeper.n_trials=2",
        "optim.lr=interval(0.01,0.2)",
        "algo=choice(fedavg,fedprox)",
    ]
    probes = validate_command_line([*sweep, *SMALL])
    assert {p for job in probes for p in job if p.startswith(("optim.lr", "algo="))} == {
        "optim.lr=0.01",
        "optim.lr=0.2",
        "algo=fedavg",
        "algo=fedprox",
    }
    with pytest.raises(ConfigError, match=r"^algo=bogus is not an option"):
        validate_command_line([*sweep[:-1], "algo=choice(fedavg,bogus)", *SMALL])
    with pytest.raises(ConfigError, match=r"optim.lr=-0.1 must be > 0"):
        validate_command_line([*sweep[:-2], "optim.lr=interval(-0.1,0.2)", *SMALL])


def test_list_jobs_lists_the_basic_sweep_and_runs_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "sweep"
    listed = run_cli(
        "-m",
        "algo=fedavg,scaffold",
        "seed=0,1",
        *SMALL,
        f"hydra.sweep.dir={directory}",
        "--list-jobs",
        cwd=tmp_path,
    )
    lines = listed.stdout.strip().splitlines()
    assert lines[0] == f"4 jobs into {directory}:"
    assert lines[1].startswith("0: algo=fedavg seed=0 ")
    assert lines[4].startswith("3: algo=scaffold seed=1 ")
    assert not directory.exists()
    assert not (tmp_path / "multirun").exists()
    # a preset's own sweep (hydra.sweeper.params) is expanded by Hydra's sweeper
    preset = validate_command_line(["-m", "+experiment=niid_bench", "seed=0"])
    assert len(preset) == 12


def test_list_jobs_lists_every_job_and_marks_each_refused_one_with_its_reason(
    tmp_path: Path,
) -> None:
    """One job that cannot run (fedasync without a system model) does not hide the others: each
    job is listed, the refused one marked with its one-line reason, and the listing ends with
    one error line (exit 2: the command as given runs none of them)."""
    listed = run_cli(
        "-m", "algo=fedavg,fedasync,fedprox", *SMALL, "--list-jobs", cwd=tmp_path, check=False
    )
    assert listed.returncode == 2
    assert listed.stdout.strip().splitlines() == [
        "3 jobs:",
        f"0: algo=fedavg {' '.join(SMALL)}",
        f"1: algo=fedasync {' '.join(SMALL)}  [refused: algo=fedasync runs on the system's "
        "virtual clock; choose a system model, e.g. system=tiers or system=homogeneous]",
        f"2: algo=fedprox {' '.join(SMALL)}",
    ]
    assert listed.stderr.strip().splitlines()[-1] == (
        "fedlight: error: 1 of the command's 3 jobs is refused (marked above): it runs none "
        "until each is fixed, or left out of the sweep (glob(..., exclude=[...]))"
    )
    assert not (tmp_path / "multirun").exists()


def test_an_interval_for_the_basic_sweeper_points_to_optuna_in_one_line(tmp_path: Path) -> None:
    refused = run_cli(
        "-m", "optim.lr=tag(log,interval(0.01,0.1))", "seed=0,1", *SMALL, cwd=tmp_path, check=False
    )
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == (
        "fedlight: error: optim.lr=tag(log,interval(0.01,0.1)): interval() is a range for an "
        "optimizing sweeper to search, and Hydra's basic sweeper (the default) runs listed "
        "values: add hydra/sweeper=optuna (and hydra.sweeper.n_trials=20), or list the values: "
        "optim.lr=0.01,0.1"
    )


def test_run_from_the_folder_above_a_clone_named_fedlight_is_one_line(tmp_path: Path) -> None:
    """`python -m fedlight` where a folder named fedlight (a clone, seen from the folder above it)
    hides the package installed in editable mode: one line naming the folder and the fix, not
    `ImportError: cannot import name 'STARTED'`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = [sys.executable, "-c", "import fedlight.cli.entry as e; print(e.__file__)"]
    installed = subprocess.run(where, cwd=tmp_path, env=env, capture_output=True, text=True)
    if installed.stdout.strip() != str(REPO / "fedlight" / "cli" / "entry.py"):
        pytest.skip("fedlight is not installed in editable mode from this checkout")
    clone = tmp_path / "fedlight"
    clone.mkdir()
    (clone / "README.md").write_text("a clone's top folder: no __init__.py\n")
    for args in (["--version"], ["fl.rounds=1"]):
        ran = subprocess.run(
            [sys.executable, "-m", "fedlight", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
        )
        assert (ran.returncode, ran.stdout) == (2, "")
        assert ran.stderr == (
            f"fedlight: error: Python took the folder {clone} for the fedlight package (a folder "
            "named fedlight in the directory you run from, e.g. a clone of fedlight, hides the "
            f"installed one); run from another directory (cd {clone}) or use the fedlight "
            "command\n"
        )


def test_version_is_fedlights() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "fedlight", "--version"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    assert result.stdout.startswith(f"fedlight {fedlight.__version__} (hydra-core ")


def test_report_imports_neither_torch_nor_lightning() -> None:
    probe = (
        "import sys, fedlight.cli.entry, fedlight.reports.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'pytorch_lightning', 'lightning', 'torchvision')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert loaded.stdout.strip() == "[]"
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "fedlight", "report", "--help"],
        capture_output=True,
        cwd=REPO,
        check=True,
    )
    assert time.perf_counter() - started < 3


def test_a_run_says_where_it_is_and_resume_alone_continues_it(tmp_path: Path) -> None:
    run = tmp_path / "run"
    given = ["algo=fedprox", "algo.mu=0.1", *SMALL, "lr_schedule=constant"]
    first = run_cli(*given, "fl.rounds=2", f"hydra.run.dir={run}", cwd=tmp_path)
    lines = first.stdout.splitlines()
    assert lines[0] == f"fedlight: run directory {run}"
    # the settings that differ from conf/config.yaml: options first, then keys (presets' too)
    assert lines[1].startswith("fedlight: settings algo=fedprox ")
    assert "algo.mu=0.1" in lines[1] and "fl.num_clients=10" in lines[1]
    assert "seed=" not in lines[1]
    console = (run / "console.log").read_text()
    assert lines[0] in console and "round 2:" in console
    assert (run / "fedlight.log").exists() and not (run / "cli.log").exists()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["command_seconds"] >= summary["wall_seconds"] > 0

    # resume= alone reapplies the run's overrides; a different value is refused naming its key
    refused = run_cli(f"resume={run}", "algo.mu=0.2", cwd=tmp_path, check=False)
    assert refused.returncode == 2
    assert "algo.mu=0.2 differs from the run's algo.mu=0.1" in refused.stderr
    run_cli(f"resume={run}", "fl.rounds=4", f"hydra.run.dir={run}", cwd=tmp_path)
    straight = tmp_path / "straight"
    run_cli(*given, "fl.rounds=4", f"hydra.run.dir={straight}", cwd=tmp_path)
    assert rows_without_timings(run) == rows_without_timings(straight)
    with (run / "metrics.csv").open() as f:
        assert [row["round"] for row in csv.DictReader(f)] == ["1", "2", "3", "4"]
    assert (run / "console.log").read_text().startswith(console)  # appended to


def test_the_records_and_the_settings_line_say_what_ran(tmp_path: Path) -> None:
    """A model class of one's own over a group's option (`model._target_=...`) is recorded as that
    class in summary.json and TensorBoard's hparams (W&B's tags take the same choices), not as the
    option it replaced; the settings line names an option typed over the one another option
    chose (`model=mlp` with data=mnist, whose model is cnn) instead of its keys, and says what a
    primary config of one's own (`--config-name`) sets."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    own = tmp_path / "own"
    args = ["model=cnn", "model._target_=fedlight.models.mlp.MLP", "logger=[csv,tensorboard]"]
    ran = run_cli(*SMALL, *args, "fl.rounds=1", f"hydra.run.dir={own}", cwd=tmp_path)
    line = next(x for x in ran.stdout.splitlines() if x.startswith("fedlight: settings "))
    assert {"model=cnn", "model._target_=fedlight.models.mlp.MLP"} <= set(line.split())
    assert json.loads((own / "summary.json").read_text())["model"] == "fedlight.models.mlp.MLP"
    events = EventAccumulator(str(own / "tensorboard"))
    events.Reload()
    session = plugin_data_pb2.HParamsPluginData.FromString(
        events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    ).session_start_info
    assert session.hparams["model"].string_value == "fedlight.models.mlp.MLP"
    long = "my_package.federated.models." + "deep_" * 8 + ".ResNet"
    assert choice_tag("model", long).endswith(".ResNet") and len(choice_tag("model", long)) == 64

    write_mnist_tree(tmp_path / "data", "MNIST")
    mnist = ["data=mnist", f"data.root={tmp_path / 'data'}", "model=mlp", "local.batch_size=8"]
    clients = ["fl.num_clients=4", "fl.clients_per_round=2", "fl.rounds=1"]
    typed = run_cli(*mnist, *clients, f"hydra.run.dir={tmp_path / 'm'}", cwd=tmp_path)
    line = next(x for x in typed.stdout.splitlines() if x.startswith("fedlight: settings "))
    assert line.startswith("fedlight: settings data=mnist model=mlp ") and "_target_" not in line

    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "mine.yaml").write_text("defaults:\n  - config\n  - _self_\n\nseed: 3\n")
    mine = ["--config-dir", str(configs), "--config-name", "mine", *SMALL, "fl.rounds=1"]
    primary = run_cli(*mine, f"hydra.run.dir={tmp_path / 'p'}", cwd=tmp_path)
    line = next(x for x in primary.stdout.splitlines() if x.startswith("fedlight: settings "))
    assert " seed=3" in line and "(all defaults)" not in line


def test_an_objective_that_cannot_name_a_number_is_refused() -> None:
    """A name no column can have is refused before any work (one that could be a column is
    checked at the first evaluated round: tests/runs/test_objective.py)."""
    with pytest.raises(ConfigError, match=r"objective='final accuracy' cannot name a number"):
        validate_command_line(["objective=final accuracy"])
