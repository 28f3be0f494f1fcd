"""The configs reach users of an installed wheel, not only of a checkout."""

import json
import site
import subprocess
import sys
import venv
from pathlib import Path

from tests.conftest import REPO

# The jobs of a command line as `fedlight` checks them before any runs.
COUNT_JOBS = (
    "from fedlight.cli.jobs import parse_command; "
    "from fedlight.cli.schema import register_configs; "
    "from fedlight.cli.validate import checked_jobs; register_configs(); "
    "print(len(checked_jobs(parse_command(['-m', '+experiment=fed_vs_central']))[1]))"
)


def test_wheel_installs_and_runs_from_an_unrelated_directory(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(dist),
            str(REPO),
        ],
        check=True,
        capture_output=True,
    )
    wheel = next(dist.glob("fedlight-*.whl"))

    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    env_site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # Dependencies come from the test's environment; fedlight itself only from the wheel.
    (env_site / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
    )

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    location = subprocess.run(
        [python, "-c", "import fedlight; print(fedlight.__file__)"],
        cwd=elsewhere,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert location.startswith(str(env_site))
    subprocess.run(
        [
            python,
            "-m",
            "fedlight",
            "fl.rounds=1",
            "fl.num_clients=4",
            "fl.clients_per_round=2",
            "hydra.run.dir=run",
        ],
        cwd=elsewhere,
        check=True,
        capture_output=True,
        env={"WANDB_MODE": "disabled"},
    )
    summary = json.loads((elsewhere / "run" / "summary.json").read_text())
    assert summary["data"] == "digits" and summary["rounds"] == 1

    # Presets and their nested option groups ship too: fed_vs_central's sweep has 3 × 3 jobs.
    preset_jobs = subprocess.run(
        [python, "-c", COUNT_JOBS],
        cwd=elsewhere,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert preset_jobs.strip() == "9"
    launcher = env_site / "fedlight" / "conf" / "hydra" / "launcher" / "slurm.yaml"
    assert launcher.exists()
