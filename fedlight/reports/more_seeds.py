"""`fedlight report --more-seeds`: the commands that add seeds to only the cells whose verdicts are
inconclusive, as many as would decide them at the observed spread (both cells of a claimed
difference get the same new seeds: they stay paired).

Each cell gets its own sweep, `<first sweep dir>-more/<cell>` (`algo-scaffold`), one job
directory per seed (`hydra.sweep.subdir=seed_${seed}`) and `resume=auto`: the same command again
skips the seeds that finished and continues those that stopped, and a later, larger plan for the
cell adds its further seeds beside them. The report of the sweep with them:
`fedlight report <sweep dir> <sweep dir>-more/* -o <dir>`.
"""

import re
import shlex
from pathlib import Path

from fedlight.reports.cells import varying_keys
from fedlight.reports.load import load_mapping
from fedlight.reports.model import Group
from fedlight.reports.paired import seed_of
from fedlight.reports.published import Undecided
from fedlight.store.sweeps import command_flags

PLANNED_KEYS = ("seed", "resume")  # the command's own, not the cell's


def cell_name(group: Group, keys: list[str]) -> str:
    """The cell's values of the settings that tell the report's cells apart, as a directory
    name Hydra reads unquoted: `algo-scaffold_partition-shards`."""
    text = "_".join(f"{k}-{group.setting(k)}" for k in keys)
    return re.sub(r"[^\w.-]", "_", text) or "cell"


def new_seeds(groups: list[Group], needed: int) -> list[int]:
    """Seeds after every seed the cells ran, as many as bring the cell with the fewest healthy
    seeds to `needed`."""
    taken = [int(s) for g in groups for s in map(seed_of, g.jobs) if s.lstrip("-").isdigit()]
    count = needed - min(len(g.healthy) for g in groups)
    start = max(taken, default=-1) + 1
    return list(range(start, start + max(count, 0)))


def plan(undecided: list[Undecided]) -> list[tuple[Group, list[int]]]:
    """Each undecided cell with the seeds to add (the union of what its verdicts need)."""
    planned: list[tuple[Group, set[int]]] = []
    for groups, verdict in undecided:
        if verdict.seeds_needed is None:
            continue
        seeds = new_seeds(groups, verdict.seeds_needed)
        for group in groups:
            entry = next((e for e in planned if e[0] is group), None)
            if entry is None:
                planned.append((group, set(seeds)))
            else:
                entry[1].update(seeds)
    return [(group, sorted(seeds)) for group, seeds in planned if seeds]


def command(group: Group, seeds: list[int], sweep: str) -> str:
    """The sweep command of one cell's extra seeds (see the module docstring)."""
    job = group.jobs[0]
    fix = "restore Hydra's record of the job, or give its flags (--config-name) by hand"
    record = load_mapping(job.directory / ".hydra" / "hydra.yaml", fix) or {}
    flags = [f for f in command_flags(record.get("hydra") or {}) if f != "-m"]
    overrides = [
        o for o in job.raw_overrides if o.partition("=")[0].lstrip("+~") not in PLANNED_KEYS
    ]
    arguments = [*flags, *overrides, f"seed=range({seeds[0]},{seeds[-1] + 1})"]
    arguments += [f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=seed_${seed}", "resume=auto"]
    return shlex.join(["python", "-m", "fedlight", "-m", *arguments])


def more_seeds_commands(undecided: list[Undecided], base: Path, groups: list[Group]) -> list[str]:
    """One command per undecided cell that more seeds would decide; `groups`: every cell of the
    report, whose differing settings name each cell's sweep."""
    keys = sorted(varying_keys(groups))
    return [
        command(group, seeds, f"{base}-more/{cell_name(group, keys)}")
        for group, seeds in plan(undecided)
    ]
