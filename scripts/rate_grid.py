"""Learning rates tuned per cell as McMahan et al. 2017 tune them (§3: a multiplicative grid, the
rate that reaches the target in the fewest rounds), then seeds at the chosen rate; what made the
records of docs/results/mcmahan2017 (its plan: docs/results/mcmahan2017/plan.txt).

Each cell's grid is a line search on rates 10^(k/3): from the plan's centre, the neighbours of the
best so far until it is bracketed by worse ones (the paper checked its best rates were inside its
grids). A rate tried after a best was found stops at the best's rounds (`fl.rounds`): it can no
longer be chosen, and its record reads `>R`. A run reads its rounds the paper's way
(`rounds_to_target_interpolated`, on the split its target is measured on).

Plan lines, in priority order (# comments):

    preset mcmahan2017_table1                 # +experiment=<preset>
    group experiment/mcmahan2017_table1       # the cells' config group
    grid <cell> <centre rate> [seeds]         # line search at seed 0, then seeds at its best
    valgrid <cell> <centre rate> [seeds]      # the same on a validation split held out of
                                              # training; the seeds train on all of it
    extra <stage> <cell> <rate> <seeds> [overrides...]   # runs at a given rate

Runs go to `<out>/<stage>/<cell>/lr<rate>_s<seed>` (stages grid, valgrid, seeds, or an extra's);
finished runs there and in `--records` (a results page's runs/, where records of Hydra sweeps
named grid_* count as grid) are read back, so the search goes on where the records stand. Every
run gets `resume=auto`: a stopped one continues from its checkpoint.

Each cell YAML's `optim.lr` follows the records (`--cells write`; `--cells check` fails where
one does not): its grid's choice, else its grid's centre, else its extra runs' rate.

    python -m scripts.rate_grid docs/results/mcmahan2017/plan.txt --out multirun/mcmahan2017 \\
        --records docs/results/mcmahan2017/runs --jobs 2 -- data.root=data fl.workers=1 \\
        fl.threads_per_worker=1
"""

import argparse
import math
import os
import re
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from fedlight.cli.schema import CONF_DIR
from fedlight.reports.computed import observation
from fedlight.reports.load import load_jobs
from fedlight.reports.model import ReportError
from fedlight.reports.stats import Censored

METRIC = "rounds_to_target_interpolated"
RATE = "optim.lr"
MAX_TRIES = 6  # rates a cell's line search tries at most
# the validation split of the honest choice: a sixth of the training examples (MNIST: 10,000)
STAGE_OVERRIDES = {"valgrid": ("data.validation_fraction=0.1666667", "eval.split=validation")}


@dataclass(frozen=True)
class Run:
    """A finished run: its cell, rate (as its override gives it), seed, stage and reading."""

    cell: str
    rate: str
    seed: int
    stage: str
    reading: Censored | None


@dataclass(frozen=True)
class Item:
    """One plan line."""

    kind: str  # grid | valgrid | extra
    stage: str
    cell: str
    rate: float  # the centre of a search, or an extra's rate
    seeds: tuple[int, ...]
    overrides: tuple[str, ...] = ()


@dataclass
class Plan:
    preset: str = ""
    group: str = ""
    items: list[Item] = field(default_factory=list)

    @classmethod
    def read(cls, path: Path) -> "Plan":
        plan = cls()
        for number, line in enumerate(path.read_text().splitlines(), 1):
            words = line.split("#")[0].split()
            if words:
                plan.add(words, f"{path}:{number}")
        if not plan.preset or not plan.group:
            raise SystemExit(f"{path}: name the `preset` and the cells' `group` in the plan")
        return plan

    def add(self, words: list[str], where: str) -> None:
        kind, *rest = words
        try:
            if kind in ("preset", "group"):
                setattr(self, kind, rest[0])
            elif kind == "extra":
                stage, cell, rate, seeds, *overrides = rest
                self.items.append(
                    Item(kind, stage, cell, float(rate), seeds_of(seeds), tuple(overrides))
                )
            elif kind in ("grid", "valgrid"):
                seeds = seeds_of(rest[2]) if len(rest) > 2 else ()
                self.items.append(Item(kind, kind, rest[0], float(rest[1]), seeds))
            else:
                raise ValueError(kind)
        except (ValueError, IndexError):
            raise SystemExit(
                f"{where}: `{' '.join(words)}` is no plan line (module docstring)"
            ) from None


def seeds_of(text: str) -> tuple[int, ...]:
    return tuple(int(s) for s in text.split(","))


def rate_of(k: int) -> float:
    """The grid's k-th rate, 10^(k/3), to three significant digits (0.0464, 0.1, 0.215, ...)."""
    return float(f"{10 ** (k / 3):.3g}")


def step_of(rate: float) -> int:
    return round(3 * math.log10(rate))


def stage_of(folder: Path, root: Path) -> str:
    """A finished run's stage: the folder under `root` it sits in (grid_*: a Hydra sweep of a
    grid)."""
    top = folder.relative_to(root).parts[0]
    return "grid" if top.startswith("grid") else top


def finished_runs(roots: list[Path], group: str) -> list[Run]:
    """Every finished run under the stage folders of `roots`."""
    found = []
    for root in (r for r in roots if r.is_dir()):
        for stage_dir in (d for d in sorted(root.iterdir()) if d.is_dir()):
            try:
                jobs = load_jobs(stage_dir)
            except ReportError:  # a stage with no finished job yet
                continue
            for job in (j for j in jobs if j.finished and group in j.overrides):
                seed = int((job.summary or {}).get("seed", job.overrides.get("seed", 0)))
                stage = stage_of(job.directory, root)
                reading = observation(job, METRIC)
                found.append(Run(job.overrides[group], job.overrides[RATE], seed, stage, reading))
    return found


def cap_of(group: str, cell: str) -> int:
    """A cell's own `fl.rounds` (its YAML in fedlight's config folder)."""
    text = (Path(CONF_DIR) / group / f"{cell}.yaml").read_text()
    return int(yaml.safe_load(text)["fl"]["rounds"])


def next_rate(item: Item, runs: list[Run], cap: int) -> tuple[float, int] | None:
    """The next (rate, rounds) of a cell's line search; None when its best is bracketed (or
    MAX_TRIES rates were tried)."""
    tried = {
        step_of(float(r.rate)): r for r in runs if r.cell == item.cell and r.stage == item.stage
    }
    if not tried:
        return item.rate, cap
    reached = {k: r.reading.value for k, r in tried.items() if r.reading and r.reading.reached}
    if len(tried) >= MAX_TRIES:
        return None
    if not reached:  # nothing reached yet: widen around the centre, larger rates first
        centre = step_of(item.rate)
        return next(
            ((rate_of(centre + d), cap) for d in (1, -1, 2, -2, 3, -3) if centre + d not in tried),
            None,
        )
    best = min(reached, key=reached.__getitem__)
    untried = [k for k in (best + 1, best - 1) if k not in tried]
    return (rate_of(untried[0]), min(cap, math.ceil(reached[best]))) if untried else None


def best_rate(item: Item, runs: list[Run]) -> str | None:
    """The rate whose run of the cell's search reached the target in the fewest rounds."""
    mine = [r for r in runs if r.cell == item.cell and r.stage == item.stage]
    reached = [r for r in mine if r.reading and r.reading.reached]
    return min(reached, key=lambda r: r.reading.value).rate if reached else None


@dataclass(frozen=True)
class Start:
    """A run to start: what marks it busy, its stage, cell, rate, seed and `fl.rounds` cut."""

    key: str
    stage: str
    cell: str
    rate: str
    seed: int
    rounds: int | None  # None: the cell's own
    overrides: tuple[str, ...] = ()


def starts(item: Item, runs: list[Run], cap: int) -> list[Start]:
    """The plan line's runs that may start now."""
    if item.kind == "extra":
        rate = f"{item.rate:g}"
        return [
            Start(
                f"{item.stage}/{item.cell}/{rate}/{s}",
                item.stage,
                item.cell,
                rate,
                s,
                None,
                item.overrides,
            )
            for s in item.seeds
            if not any(
                r.cell == item.cell and r.stage == item.stage and r.seed == s and r.rate == rate
                for r in runs
            )
        ]
    step = next_rate(item, runs, cap)
    if step is not None:
        rounds = step[1] if step[1] < cap else None
        rate = f"{step[0]:g}"
        return [Start(f"{item.stage}/{item.cell}", item.stage, item.cell, rate, 0, rounds)]
    best = best_rate(item, runs)
    done = {(r.seed, r.rate) for r in runs if r.cell == item.cell and r.stage == "seeds"}
    return [
        Start(f"seeds/{item.cell}/{best}/{s}", "seeds", item.cell, best, s, None)
        for s in (item.seeds if best is not None else ())
        if (s, best) not in done
    ]


def command(plan: Plan, start: Start, out: Path, given: list[str]) -> tuple[list[str], Path]:
    """`python -m fedlight` for the run, and its directory."""
    run_dir = out / start.stage / start.cell / f"lr{start.rate}_s{start.seed}"
    cut = [] if start.rounds is None else [f"fl.rounds={start.rounds}"]
    arguments = [
        f"+{plan.group}={start.cell}",  # the cell first, as the preset's own sweep composes it
        f"+experiment={plan.preset}",
        f"{RATE}={start.rate}",
        f"seed={start.seed}",
        *cut,
        *STAGE_OVERRIDES.get(start.stage, ()),
        *start.overrides,
        *given,
        "resume=auto",
        f"hydra.run.dir={run_dir}",
    ]
    return [sys.executable, "-m", "fedlight", *arguments], run_dir


def launch(arguments: list[str], run_dir: Path) -> int:
    """The run, its console appended to `<run dir>.log` beside it."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    with (run_dir.parent / f"{run_dir.name}.log").open("a") as log:
        log.write(f"=== {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {arguments}\n")
        log.flush()
        return subprocess.call(arguments, stdout=log, stderr=subprocess.STDOUT, env=os.environ)


def runnable(plan: Plan, runs: list[Run], busy: set[str]) -> list[Start]:
    """Every run the plan may start now, in its order, none already running."""
    found = []
    for item in plan.items:
        cap = cap_of(plan.group, item.cell)
        found += [s for s in starts(item, runs, cap) if s.key not in busy]
    return found


def drive(plan_path: Path, out: Path, records: list[Path], jobs: int, given: list[str]) -> None:
    """Run the plan `jobs` runs at a time until nothing is left to start (the plan is read again
    after each run: lines may be added while it goes)."""
    busy: dict[Future[int], str] = {}
    with ThreadPoolExecutor(jobs) as pool:
        while True:
            plan = Plan.read(plan_path)
            runs = finished_runs([out, *records], plan.group)
            for start in runnable(plan, runs, set(busy.values()))[: jobs - len(busy)]:
                arguments, run_dir = command(plan, start, out, given)
                busy[pool.submit(launch, arguments, run_dir)] = start.key
            if not busy:
                return
            done, _ = wait(busy, return_when=FIRST_COMPLETED)
            for future in done:
                busy.pop(future)


LR_LINE = re.compile(r"^(?P<indent>\s+)lr:.*$", re.M)


def cell_rate(plan: Plan, runs: list[Run], cell: str, current: float) -> tuple[float, str]:
    """The rate a cell's YAML should name and why: its grid's choice, else the centre of its
    plan's grid, else the rate of its extra runs; a cell the plan leaves out keeps `current`."""
    items = [i for i in plan.items if i.cell == cell]
    for item in (i for i in items if i.kind == "grid"):
        best = best_rate(item, runs)
        if best is not None and next_rate(item, runs, 0) is not None:
            return float(best), "the best so far of seed 0's grid, whose search goes on (plan.txt)"
        if best is not None:
            return float(best), "the rate seed 0's grid chose (the page's learning-rate grid)"
        return item.rate, "the centre of its grid, which has not chosen yet (plan.txt)"
    for item in (i for i in items if i.kind == "extra" and not i.overrides):
        return item.rate, "no grid of its own: the rate of its runs in plan.txt"
    return current, "not run on the page: tune it (plan.txt)"


def write_cells(plan: Plan, runs: list[Run], check: bool) -> list[str]:
    """Each cell YAML's `optim.lr` line as `cell_rate` says; the cells that differ (written, or
    with `check` only listed)."""
    changed = []
    for path in sorted((Path(CONF_DIR) / plan.group).glob("*.yaml")):
        text = path.read_text()
        current = float(yaml.safe_load(text)["optim"]["lr"])
        rate, why = cell_rate(plan, runs, path.stem, current)
        line = LR_LINE.search(text)
        if line is None:
            raise SystemExit(f"{path}: no `lr:` line under optim to write the cell's rate in")
        new = text.replace(line.group(0), f"{line.group('indent')}lr: {rate:g}  # {why}", 1)
        if new != text:
            changed.append(path.stem)
            if not check:
                path.write_text(new)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("plan", type=Path)
    parser.add_argument("--out", type=Path, help="where the runs go")
    parser.add_argument("--records", type=Path, action="append", default=[])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--dry-run", action="store_true", help="print what would start now")
    parser.add_argument(
        "--cells", choices=("write", "check"), help="each cell YAML's rate from the records"
    )
    argv = sys.argv[1:] if argv is None else argv
    given = argv[argv.index("--") + 1 :] if "--" in argv else []  # every run's overrides
    args = parser.parse_args(argv[: len(argv) - len(given) - bool(given or "--" in argv)])
    if args.cells:
        plan = Plan.read(args.plan)
        changed = write_cells(plan, finished_runs(args.records, plan.group), args.cells == "check")
        print("\n".join(changed))
        return int(bool(changed) and args.cells == "check")
    if args.out is None:
        parser.error("--out: name the folder the runs go to")
    if args.dry_run:
        plan = Plan.read(args.plan)
        runs = finished_runs([args.out, *args.records], plan.group)
        for start in runnable(plan, runs, set()):
            print(" ".join(command(plan, start, args.out, given)[0][3:]))
        return 0
    drive(args.plan, args.out, args.records, args.jobs, given)
    return 0


if __name__ == "__main__":
    sys.exit(main())
