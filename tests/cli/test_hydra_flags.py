"""Hydra's command line as Hydra users type it (issue 54, item 8): `glob()` sweeps, a primary
config of one's own (`--config-dir` + `--config-name`), one-line errors with `--config-dir`,
`--info` once, and `--help` and tab completion answered without torch or Lightning."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedlight.core.errors import ConfigError
from tests.conftest import REPO, TINY, run_cli
from tests.helpers.commands import validate_command_line

SMALL = [o for o in TINY if not o.startswith("fl.rounds=")]
HEAVY = ("torch", "pytorch_lightning", "lightning", "torchvision", "opacus")


def own_configs(root: Path) -> Path:
    """A folder of one's own configs: a primary config on fedlight's, and an algo option."""
    (root / "algo").mkdir(parents=True)
    (root / "algo" / "my_fedprox.yaml").write_text("defaults:\n  - fedprox\n\nmu: 0.25\n")
    (root / "myrun.yaml").write_text(
        "defaults:\n  - config\n  - _self_\n\nfl:\n  rounds: 1\n  num_clients: 10\n"
    )
    return root


def test_a_glob_sweep_lists_the_options_it_matches() -> None:
    jobs = validate_command_line(["-m", "algo=glob(fedavg*)", "seed=0,1", *SMALL])
    assert [job[:2] for job in jobs] == [
        ["algo=fedavg", "seed=0"],
        ["algo=fedavg", "seed=1"],
        ["algo=fedavgm", "seed=0"],
        ["algo=fedavgm", "seed=1"],
    ]
    excluded = validate_command_line(["-m", "algo=glob(fed*,exclude=[fedasync,fedbuff,fed?v*])"])
    assert {job[0] for job in excluded} == {
        "algo=fedadagrad",
        "algo=fedadam",
        "algo=fednova",
        "algo=fedper",
        "algo=fedprox",
        "algo=fedyogi",
    }
    with pytest.raises(ConfigError, match=r"^algo=glob\(zzz\*\) names no option of algo; "):
        validate_command_line(["-m", "algo=glob(zzz*)"])


def test_a_primary_config_of_ones_own_runs_a_glob_sweep_of_its_options(tmp_path: Path) -> None:
    """`--config-dir D --config-name myrun`, as a plain Hydra app takes them; the glob sees D's
    options too, in the check before the sweep and in Hydra's run of it."""
    configs = own_configs(tmp_path / "configs")
    sweep = tmp_path / "sweep"
    flags = ["-m", "--config-dir", str(configs), "--config-name", "myrun"]
    run_cli(*flags, "algo=glob(my_*)", *SMALL, f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert (sweep / "0" / "summary.json").is_file() and not (sweep / "1").exists()
    rows = (sweep / "0" / "metrics.csv").read_text().splitlines()
    assert len(rows) == 2  # the header and myrun's one round


def test_a_typo_with_a_config_dir_is_one_line(tmp_path: Path) -> None:
    configs = own_configs(tmp_path / "configs")
    result = run_cli(
        "--config-dir", str(configs), "algo=my_fedprox", "fl.roundz=3", cwd=tmp_path, check=False
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "fedlight: error: unknown key fl.roundz; fl has:"
    )
    missing = run_cli(
        "--config-dir", str(configs), "--config-name", "nope", cwd=tmp_path, check=False
    )
    assert missing.returncode == 2
    assert missing.stderr.count("\n") == 1 and "Cannot find primary config 'nope'" in missing.stderr


def answered(*args: str, env: dict[str, str] | None = None) -> tuple[str, str]:
    """What `fedlight args` prints, and which of the heavy packages its process imported."""
    probe = (
        "import sys; from fedlight.cli.entry import main; sys.argv = ['fedlight', *sys.argv[1:]]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}), file=sys.stderr)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
        env={**os.environ, **(env or {})},
    )
    return result.stdout, result.stderr.strip().splitlines()[-1]


def test_help_info_and_completion_answer_without_torch() -> None:
    help_text, loaded = answered("--help")
    assert "== Configuration groups ==" in help_text and "algo: central, " in help_text
    assert loaded == "[]"
    info, loaded = answered("--info")
    assert info.count("Hydra 1.3") == 1 and info.count("Installed Hydra Plugins") == 1
    assert loaded == "[]"
    line = "fedlight algo=sca"
    words, loaded = answered(
        "-sc", "query=bash", env={"COMP_LINE": line, "COMP_POINT": str(len(line))}
    )
    assert words.split() == ["algo=scaffold"] and loaded == "[]"


def test_bash_completion_as_installed(tmp_path: Path) -> None:
    """`eval "$(fedlight -sc install=bash)"` (docs/howto/shell-completion.md), then a Tab press:
    bash's own completion function asks fedlight for the words."""
    command = tmp_path / "bin" / "fedlight"
    command.parent.mkdir()
    command.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m fedlight "$@"\n')
    command.chmod(0o755)
    script = (
        'eval "$(fedlight -sc install=bash)"\n'
        'COMP_LINE="fedlight fl.ro"; COMP_POINT=${#COMP_LINE}; COMP_CWORD=1\n'
        'hydra_bash_completion; echo "${COMPREPLY[@]}"\n'
    )
    path = f"{command.parent}{os.pathsep}{os.environ['PATH']}"
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    result = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
        env={**os.environ, "PATH": path, "PYTHONPATH": pythonpath},
    )
    assert result.stdout.split() == ["fl.rounds="]
