"""What the command line refuses in one line before a run begins (a config of one's own that
lacks fedlight's, a group removed, a device torch does not know, a job name that leaves the run
directory, a bad value beside `--help` or `--cfg`), and a data root of null as the run loads."""

import re
from pathlib import Path

import pytest

from tests.conftest import TINY, run_cli

ONE = [o for o in TINY if not o.startswith("fl.rounds=")] + ["fl.rounds=1"]


def refused_in_one_line(result: object, pattern: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("fedlight: error: ") and re.search(pattern, last), last


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (["~algo"], r"^fedlight: error: ~algo removes the algo group, .*algo=<option>.*fedavg"),
        (["device=tpu"], r"device=tpu is not a torch device; use auto, cpu, cuda or cuda:N$"),
        (
            ["hydra.job.name=../../ESCAPED"],
            r"hydra\.job\.name=\.\./\.\./ESCAPED: .*cannot hold a folder; give a plain name$",
        ),
        (["data=mnist", "data.root=null"], r"data=mnist with data\.root=null: give the folder"),
    ],
)
def test_a_setting_a_run_cannot_take_is_one_line(
    tmp_path: Path, args: list[str], pattern: str
) -> None:
    run = tmp_path / "run"
    refused = run_cli(*ONE, *args, f"hydra.run.dir={run}", cwd=tmp_path, check=False)
    refused_in_one_line(refused, pattern)
    assert not list(tmp_path.glob("*ESCAPED*")) and not list(tmp_path.parent.glob("*ESCAPED*"))


@pytest.mark.parametrize("with_overrides", [True, False])
def test_a_primary_config_without_fedlights_is_one_line(
    tmp_path: Path, with_overrides: bool
) -> None:
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "bare.yaml").write_text("fl:\n  rounds: 2\n")
    given = ONE if with_overrides else []
    refused = run_cli(
        "--config-dir", str(configs), "--config-name", "bare", *given, cwd=tmp_path, check=False
    )
    refused_in_one_line(
        refused,
        r"--config-name bare: it lacks fedlight's .*; start its defaults list with fedlight's "
        r"config \(defaults: \[config, _self_\]\)$",
    )


@pytest.mark.parametrize("flag", [["--help"], ["--cfg", "job"], ["--info", "config"]])
def test_a_bad_value_beside_a_flag_that_answers_is_one_line(
    tmp_path: Path, flag: list[str]
) -> None:
    refused = run_cli(*flag, "fl.rounds=abc", cwd=tmp_path, check=False)
    refused_in_one_line(
        refused, r"fl\.rounds=abc; Value 'abc' of type 'str' could not be converted to Integer"
    )
    assert run_cli(*flag, "fl.rounds=3", cwd=tmp_path).returncode == 0
