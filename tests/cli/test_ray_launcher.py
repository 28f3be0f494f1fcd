"""`hydra/launcher=ray`: a sweep's jobs as tasks of a Ray instance (Hydra's Ray launcher plugin,
the `ray` extra: `pip install 'fedlight[ray]'`). Skipped where the plugin is not installed (the
`dev` extra leaves it out: it pins cloudpickle below 3)."""

import importlib.util
import json
import re
import secrets
from pathlib import Path

import pytest

from fedlight.core.errors import ConfigError
from fedlight.reports.cli import main as report_main
from tests.conftest import TINY, compose_config, rows_without_timings, run_cli

RAY_PLUGIN = "hydra_plugins.hydra_ray_launcher"
HAS_RAY = all(importlib.util.find_spec(m) is not None for m in ("ray", RAY_PLUGIN))
needs_ray = pytest.mark.skipif(
    not HAS_RAY,
    reason="ray and Hydra's Ray launcher are not installed (pip install 'fedlight[ray]')",
)


@needs_ray
def test_ray_launcher_composes_on_hydras_ray_plugin() -> None:
    launcher = compose_config(["hydra/launcher=ray"]).hydra.launcher
    assert launcher._target_ == f"{RAY_PLUGIN}.ray_launcher.RayLauncher"
    assert launcher.ray.init.address is None  # a Ray instance of the sweep's own, on this machine


@pytest.mark.skipif(HAS_RAY, reason="the Ray launcher is installed")
def test_without_the_plugin_hydra_launcher_ray_names_the_extra_to_install() -> None:
    from tests.helpers.commands import validate_command_line

    with pytest.raises(ConfigError, match=r"pip install 'fedlight\[ray\]'"):
        validate_command_line(["-m", *TINY, "seed=0,1", "hydra/launcher=ray"])


def job_span(job: Path) -> tuple[float, float]:
    """When a job started (Hydra writes its .hydra/config.yaml before the job runs) and ended
    (its summary.json, written after the last round)."""
    return (job / ".hydra" / "config.yaml").stat().st_mtime, (job / "summary.json").stat().st_mtime


def files_under(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


@needs_ray
@pytest.mark.slow
def test_a_ray_sweep_runs_its_jobs_at_once_and_writes_what_the_basic_launcher_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two jobs on a local Ray instance (the machine's cores, one CPU per job): both run at once,
    each in a Ray worker of its own with one torch thread, into <sweep dir>/<job num>/ with the
    files of the basic launcher's sweep and the same metrics; `fedlight report` reads the sweep."""
    # Ray's single-node mode: its processes talk over 127.0.0.1 only; a token in the environment
    # instead of one Ray would write to ~/.ray; no dashboard (a web server the test does not need).
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    monkeypatch.setenv("RAY_AUTH_TOKEN", secrets.token_hex(16))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    sweep = ["-m", *TINY, "seed=0,1"]
    on_ray, basic = tmp_path / "ray", tmp_path / "basic"
    ray_args = ["hydra/launcher=ray", "+hydra.launcher.ray.init.include_dashboard=false"]
    result = run_cli(*sweep, *ray_args, f"hydra.sweep.dir={on_ray}", cwd=tmp_path)
    run_cli(*sweep, f"hydra.sweep.dir={basic}", cwd=tmp_path)

    # Each job in a Ray worker process of its own (Ray prefixes what a task prints with its pid)
    printed = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout)  # without the prefixes' colours
    started = re.findall(r"\(_run_job pid=(\d+)\) fedlight: run directory (\S+)", printed)
    assert sorted(d for _, d in started) == [str(on_ray / "0"), str(on_ray / "1")], result.stdout
    assert len({pid for pid, _ in started}) == 2
    # ... at once: each started before the other ended (the basic launcher: one after the other)
    (start0, end0), (start1, end1) = job_span(on_ray / "0"), job_span(on_ray / "1")
    assert start0 < end1 and start1 < end0, (start0, end0, start1, end1)
    assert job_span(basic / "0")[1] <= job_span(basic / "1")[0]
    for job in ("0", "1"):
        parallelism = json.loads((on_ray / job / "summary.json").read_text())["parallelism"]
        assert parallelism["workers"] == 1  # one CPU per task: Ray sets OMP_NUM_THREADS=1
        assert parallelism["why"] == "1 worker (1 CPU thread)"
        assert rows_without_timings(on_ray / job) == rows_without_timings(basic / job)
    assert files_under(on_ray) == files_under(basic)
    for directory in (on_ray, basic):
        assert report_main([str(directory)]) == 0
    assert result_cells(on_ray) == result_cells(basic)


def result_cells(sweep: Path) -> list[str]:
    """The report's row of the sweep: accuracies, rounds to target and communication (the time
    columns left out)."""
    (row,) = [
        line
        for line in (sweep / "report.md").read_text().splitlines()
        if line.startswith("| all |")
    ]
    return [cell.strip() for cell in row.split("|")[1:6]]
