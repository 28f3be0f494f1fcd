"""A resume says what it did (issue 54, item 12): the round it continues from, of how many, and
when its checkpoint was written; a finished run asked for no more rounds says so and writes
nothing, neither in its own directory nor in a new one of Hydra's."""

import os
import re
from datetime import datetime
from pathlib import Path

import pytest

from fedlight.store.run_files import CHECKPOINT_NAME
from tests.conftest import TINY, run_cli

RUN = [*TINY, "fl.rounds=2"]


def files_of(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root` with its size and modification time (ns)."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            stat = path.stat()
            found[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime_ns)
    return found


@pytest.fixture
def finished(tmp_path: Path) -> Path:
    directory = tmp_path / "run"
    run_cli(*RUN, f"hydra.run.dir={directory}", cwd=tmp_path)
    return directory


def test_a_resume_names_the_round_it_continues_from_and_its_checkpoint_time(
    finished: Path, tmp_path: Path
) -> None:
    stamp = datetime(2026, 1, 2, 3, 4, 5).timestamp()
    os.utime(finished / CHECKPOINT_NAME, (stamp, stamp))
    more = run_cli(*RUN, "fl.rounds=3", f"resume={finished}", cwd=tmp_path)
    when = datetime.fromtimestamp(stamp).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
    assert f"resumed from round 2 of 3 (checkpoint of {when})" in more.stdout, more.stdout
    # the rounds it ran before are replayed (the new directory's metrics.csv holds all three)
    rounds = re.findall(r"^round (\d+): acc", more.stdout + more.stderr, re.M)
    assert rounds == ["1", "2", "3"], more.stdout + more.stderr


@pytest.mark.parametrize("resume", ["dir", "auto"])
def test_a_finished_run_resumed_without_more_rounds_says_so_and_writes_nothing(
    finished: Path, tmp_path: Path, resume: str
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    before = files_of(tmp_path)
    if resume == "dir":  # Hydra would make a new run directory under elsewhere/outputs
        args = [f"resume={finished}"]
    else:
        args = [*RUN, f"hydra.run.dir={finished}", "resume=auto"]
    again = run_cli(*args, cwd=elsewhere)
    [line] = again.stdout.strip().splitlines()
    if resume == "dir":
        assert line == (
            f"fedlight: {finished}: finished (2 of 2 rounds): nothing to resume; give "
            "fl.rounds > 2 to continue it"
        )
    else:
        assert line.startswith(f"fedlight: {finished}: finished with this config (final acc ")
    assert again.stderr == ""
    assert files_of(tmp_path) == before
    assert list(elsewhere.iterdir()) == []
