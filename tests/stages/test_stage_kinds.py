"""Stage kinds of other packages (entry points of `fedlight.stage_kinds`) that are broken: a kind
named like no config key, a package that fails to import, a stage whose `client_side` returns
something else than (upload, state). A broken kind stops only the runs that choose it, with one
line; the others go on without it and say so."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from fedlight.cli import schema
from fedlight.core.errors import ConfigError
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from tests.conftest import REPO, TINY, run_cli
from tests.project.test_examples import ENTRY_POINT, installed

ONE_ROUND = [*(o for o in TINY if not o.startswith("fl.rounds=")), "fl.rounds=1"]
BROKEN = "brokenkind.stage:Stage"  # a package that raises as it is imported


@contextmanager
def plugged(kinds: dict[str, str]) -> Iterator[None]:
    """`kinds` registered as an installed package's entry points would be, in this process only;
    the installed packages' kinds again afterwards."""
    schema.register_stage_kinds(kinds)
    schema.register_schema()
    try:
        yield
    finally:
        schema.register_stage_kinds()
        schema.register_schema()


def broken_package(site: Path) -> Path:
    """A package `brokenkind` in `site` that raises as it is imported, and a conf folder with an
    option `x` of its kind `broken`."""
    (site / "brokenkind").mkdir(parents=True)
    (site / "brokenkind" / "__init__.py").write_text('raise RuntimeError("broken on import")\n')
    (site / "conf" / "broken").mkdir(parents=True)
    (site / "conf" / "broken" / "x.yaml").write_text("_target_: brokenkind.stage.Stage\n")
    return site


def test_a_kind_named_like_no_config_key_is_left_out_and_said(
    make_job: Callable[[list[str]], Job], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with plugged({"bad-name!": ENTRY_POINT}):
        assert "bad-name!" not in schema.CONFIG_GROUPS
        job = make_job(ONE_ROUND)
        run_job(job, tmp_path)
    assert [stage.name for stage in job.stages.chained] == ["secure_aggregation"]
    assert capsys.readouterr().err.splitlines()[0] == (
        f"fedlight: warning: the stage kind 'bad-name!' ({ENTRY_POINT}, entry point of "
        "fedlight.stage_kinds) is left out: its name is no config key (letters, digits and _, "
        "not a digit first); rename it in its package's pyproject.toml"
    )


def test_a_kind_whose_package_fails_to_import_stops_only_the_runs_that_choose_it(
    make_job: Callable[[list[str]], Job],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    site = broken_package(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))
    with plugged({"broken": BROKEN}):
        job = make_job(ONE_ROUND)
        run_job(job, tmp_path / "run")
        assert [stage.name for stage in job.stages.chained] == ["secure_aggregation"]
        # Hydra's get_class also logs the failure (through a handler of its own: a
        # "--- Logging error ---" where an earlier test's captured stream is gone); ours is a line
        assert (
            "fedlight: warning: the stage kind broken (brokenkind.stage.Stage) is left out of the "
            "runs that choose no option of it: its class cannot be imported (RuntimeError: broken "
            "on import); a run that chooses one fails"
        ) in capsys.readouterr().err.splitlines()
        with pytest.raises(ConfigError) as error:
            make_job([*ONE_ROUND, f"hydra.searchpath=[file://{site / 'conf'}]", "+broken=x"])
    assert str(error.value).startswith("broken: ") and "\n" not in str(error.value)
    assert "broken on import" in str(error.value)


@pytest.mark.parametrize(
    ("kind", "returned"),
    [
        ("returns_none", "None"),
        ("returns_dict", "a dict"),
        ("returns_upload", "a ClientUpload"),
    ],
)
def test_a_stage_whose_client_side_returns_no_pair_is_named_in_one_line(
    make_job: Callable[[list[str]], Job], tmp_path: Path, kind: str, returned: str
) -> None:
    stage = "".join(part.title() for part in kind.split("_"))
    with (
        plugged({kind: f"tests.helpers.fault_stages:{stage}"}),
        pytest.raises(ConfigError) as error,
    ):
        run_job(make_job(ONE_ROUND), tmp_path)
    assert str(error.value) == (
        f"{kind}: {stage}.client_side returned {returned}, not (upload, state); return the "
        "ClientUpload it passes on and the stage's client state (None: none), as "
        "fedlight.UploadStage.client_side says"
    )


def test_broken_kinds_of_an_installed_package_leave_the_runs_that_do_not_choose_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the CLI: a package whose kinds are named like no config key or fail to import;
    a run that chooses none of them runs, saying so once each."""
    site = broken_package(tmp_path / "site")
    monkeypatch.setenv(
        "PYTHONPATH", str(installed(site, {"bad-name!": ENTRY_POINT, "broken": BROKEN}))
    )
    run = tmp_path / "run"
    result = run_cli(*ONE_ROUND, f"hydra.run.dir={run}", cwd=REPO, check=False, fresh=True)
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "warning: the stage kind" in line]
    assert len(warnings) == 2 and "'bad-name!'" in warnings[0] and "broken" in warnings[1]
    assert (run / "summary.json").exists()
