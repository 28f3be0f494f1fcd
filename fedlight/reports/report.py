"""`fedlight report <sweep dir>`: a Hydra multirun turned into the tables a paper needs.

Jobs that differ only in their seed form a group, and every cell is mean ± std over that group's
seeds, so a gap between methods can be read against the seed-to-seed spread. Unfinished jobs are
listed, never averaged in; a seed that diverged (`diverged_at_round` in its summary.json) is left
out of its cell's mean ± std and marked `† <d> of <n> diverged`, with a footnote naming it. A seed
that collapsed to chance accuracy (`collapsed_at_round`) is a result and stays in, marked
`‡ <c> of <n> collapsed` with its own footnote. One line gives the environment the jobs ran in
(`environment` in summary.json: what decides float rounding), and a table whose jobs differ in
it says so under it.
"""

import argparse
import csv
import json
import math
import os
import re
import shlex
import statistics
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fedlight.core.errors import ConfigError
from fedlight.loggers.base import MetricsRow, evaluated
from fedlight.reports import curves
from fedlight.reports.curves import Line, Panel
from fedlight.reports.study_report import studies_markdown
from fedlight.store.sweeps import command_flags, job_dirs, job_order, job_state

ERROR_PREFIX = "fedlight report: error: "
PASS_INSTEAD = "pass the sweep directory that `fedlight -m ...` wrote, e.g. multirun/<date>/<time>"
OVERRIDE_PREFIXES = ("++", "+", "~")
DEFAULT_METRICS = (
    "final_accuracy",
    "best_accuracy",
    "rounds_to_target",
    "comm_mb",
    "client_seconds_per_round",
    "wall_seconds",
)
METRIC_TITLES = {
    "final_accuracy": "Final accuracy (%)",
    "best_accuracy": "Best accuracy (%)",
    "test_accuracy_at_best": "Test accuracy at the best round (%)",
    "val_accuracy": "Validation accuracy, last round (%)",
    "comm_mb": "Communication (MB)",
    "comm_mb_per_round": "MB per round",
    "local_accuracy_mean": "Local accuracy, mean (%)",
    "local_accuracy_p10": "Local accuracy, 10th percentile (%)",
    "local_accuracy_std": "Local accuracy, std (%)",
    "wall_seconds": "Wall time (s)",
    "client_seconds_per_round": "Client compute (s/round)",
    "participation_jain": "Jain's index of participation",
    "participation_min": "Fewest rounds a client trained",
    "participation_max": "Most rounds a client trained",
    "malicious": "Malicious participants",
    "rejected": "Rejected updates (NaN/Inf)",
    "aggregation_refused": "Rounds the aggregator refused",
    "upload_mb": "Upload (MB)",
    "epsilon": "ε reached",
    "privacy.noise_multiplier": "Noise multiplier z",
    "privacy.clip": "Clip norm",
    "virtual_time": "Virtual time (s)",
    "staleness_mean": "Staleness, mean (last update)",
    "staleness_max": "Staleness, max (last update)",
    "staleness_run_mean": "Staleness, mean",
    "staleness_run_p90": "Staleness, 90th percentile",
    "staleness_run_max": "Staleness, max",
}
# Metrics counted until the first round reaching the target accuracy: "<title> <target>".
TO_TARGET_TITLES = {
    "rounds_to_target": "Rounds to",
    "mb_to_target": "MB (up + down) to",
    "upload_mb_to_target": "Upload MB to",
    "virtual_time_to_target": "Virtual seconds to",
}
# Decimals of a cell where one is not enough (an index in [1/N, 1]).
DECIMALS = {"participation_jain": 3}
ACCURACY_AT = re.compile(r"accuracy_at_(\d+)")
LOSS_AT = re.compile(r"loss_at_(\d+)")  # the test loss at round R (metrics.csv)
# The first round whose test accuracy reaches N percent (metrics.csv): rounds_to_70, rounds_to_72.3
ROUNDS_TO = re.compile(r"rounds_to_(\d+(?:\.\d+)?)")
MISSING = "—"
DIVERGED_MARK = "†"
DIVERGED_KEY = "diverged_at_round"
COLLAPSED_MARK = "‡"
NEVER_MARK = "§"
NEVER_KEY = "never_left_chance"
COLLAPSED_KEY = "collapsed_at_round"
ROUND_KEYS = (DIVERGED_KEY, COLLAPSED_KEY)
ENVIRONMENT_KEY = "environment"
UNKNOWN = "unknown"
NAMED_JOBS = 3  # jobs named per value in a warning that jobs differ in their environment
# Environment keys a cell's own settings decide (DP-SGD trains with its own engine): a table whose
# cells differ in them is no warning, only a cell whose seeds do.
CELL_DECIDED = ("engine", "memory_format")
# The layout of every run before `fl.memory_format` existed (a summary that does not record it).
LAYOUT_BEFORE = "contiguous"
OLDER_SUMMARY = "summary.json written before fedlight recorded it"
REMOVE_JOB = "or move the job directory out of the sweep"
# Overrides that do not make a different experiment: the seed varies within a group, and a run
# resumed from a checkpoint gives the uninterrupted run's numbers.
NOT_GROUPED = ("seed", "resume")
# Numbers in summary.json that describe the run rather than measure it.
NOT_METRICS = ("seed", "target_accuracy", *ROUND_KEYS)


class ReportError(Exception):
    """The sweep directory cannot be reported on; the message says what to pass instead."""


@dataclass(frozen=True)
class Layout:
    """How a preset wants its table laid out (`report:` in its config); None fields are derived."""

    title: str | None = None
    rows: tuple[str, ...] | None = None
    columns: tuple[str, ...] = ()
    metrics: tuple[str, ...] = DEFAULT_METRICS
    # metrics.csv columns drawn in curves.png, one panel each (test_loss beside the accuracy)
    curves: tuple[str, ...] = ("test_accuracy",)
    transpose: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    reference: str | None = None
    x: str = "round"  # the curves' x axis: round, or virtual_time (seconds on the system clock)

    @classmethod
    def from_config(cls, section: dict[str, Any] | None) -> "Layout":
        if not section:
            return cls()
        rows = section.get("rows")
        return cls(
            title=section.get("title"),
            rows=None if rows is None else as_keys(rows),
            columns=as_keys(section.get("columns")),
            metrics=as_keys(section.get("metrics")) or DEFAULT_METRICS,
            curves=as_keys(section.get("curves")) or ("test_accuracy",),
            transpose=bool(section.get("transpose", False)),
            labels={str(k): str(v) for k, v in (section.get("labels") or {}).items()},
            reference=section.get("reference"),
            x=str(section.get("x", "round")),
        )


def as_keys(value: str | list[str] | None) -> tuple[str, ...]:
    """A YAML key list, also accepting a single key written without brackets."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(str(v) for v in value)


@dataclass
class JobResult:
    """One job directory of the sweep; `summary` is None until the job has finished."""

    name: str
    directory: Path
    overrides: dict[str, str]
    raw_overrides: list[str]
    summary: dict[str, Any] | None
    rows: list[MetricsRow]
    layout: Layout
    target_accuracy: float | None = None

    @property
    def finished(self) -> bool:
        return self.summary is not None

    @property
    def evaluated_rows(self) -> list[MetricsRow]:
        """The rows with a (finite) test accuracy: of the evaluated rounds (`eval.every`)."""
        return evaluated(self.rows)

    @property
    def diverged_at_round(self) -> int | None:
        """The round in which its loss or weights became NaN/Inf; None for a healthy run (and for
        summaries older than the key)."""
        return (self.summary or {}).get(DIVERGED_KEY)

    @property
    def collapsed_at_round(self) -> int | None:
        """The round from which its accuracy stayed at chance; None for a run that did not
        collapse (and for summaries older than the key)."""
        return (self.summary or {}).get(COLLAPSED_KEY)

    @property
    def never_left_chance(self) -> bool:
        """Every evaluation at chance: it never learned (False for summaries older than the
        key)."""
        return (self.summary or {}).get(NEVER_KEY) is True

    @property
    def environment(self) -> dict[str, Any]:
        """What decided its float results; empty for summaries older than the record."""
        environment = (self.summary or {}).get(ENVIRONMENT_KEY)
        return environment if isinstance(environment, dict) else {}

    def setting(self, key: str) -> str | None:
        """A key's value from the command line, else the config group it chose, else None."""
        if key in self.overrides:
            return self.overrides[key]
        value = (self.summary or {}).get(key)
        return None if value is None else str(value)


@dataclass
class Group:
    """Finished jobs with the same overrides apart from the seed."""

    overrides: dict[str, str]
    jobs: list[JobResult]

    @property
    def n(self) -> int:
        return len(self.jobs)

    @property
    def healthy(self) -> list[JobResult]:
        """The seeds its statistics are over."""
        return [job for job in self.jobs if job.diverged_at_round is None]

    @property
    def diverged(self) -> list[JobResult]:
        return [job for job in self.jobs if job.diverged_at_round is not None]

    @property
    def collapsed(self) -> list[JobResult]:
        """The healthy seeds that collapsed: in its statistics, and marked."""
        return [job for job in self.healthy if job.collapsed_at_round is not None]

    @property
    def never_learned(self) -> list[JobResult]:
        """The healthy seeds that never left chance: in its statistics, and marked."""
        return [job for job in self.healthy if job.never_left_chance]

    def setting(self, key: str) -> str | None:
        return self.jobs[0].setting(key)


@dataclass
class Section:
    """The groups that share one layout, with that layout's row/column keys resolved."""

    layout: Layout
    groups: list[Group]
    extra_keys: list[str]

    @property
    def row_keys(self) -> list[str]:
        return [*(self.layout.rows or ()), *self.extra_keys]

    def display(self, group: Group, key: str) -> str:
        """The value's label, or the value itself."""
        value = group.setting(key)
        return MISSING if value is None else self.layout.labels.get(value, value)

    def described(self, group: Group, key: str) -> str:
        """`key=value`, or the value's label when the layout names it."""
        value = group.setting(key)
        if value is None:
            return f"{key}={MISSING}"
        return self.layout.labels.get(value, f"{key}={value}")

    def row_label(self, group: Group) -> str:
        if not self.row_keys:
            return "all"
        named = ", ".join(self.display(group, k) for k in self.layout.rows or ())
        # a key the row's jobs were not given (the config's default) is left out of its label
        given = [(k, group.setting(k)) for k in self.extra_keys]
        extra = ", ".join(f"{k}={value}" for k, value in given if value is not None)
        if named and extra:
            return f"{named} ({extra})"
        return named or extra or "defaults"

    def column_label(self, group: Group) -> str:
        return ", ".join(self.described(group, k) for k in self.layout.columns)

    def group_label(self, group: Group) -> str:
        """The cell in words, leaving out the keys its jobs were not given."""
        keys = [*self.row_keys, *self.layout.columns]
        given = [self.described(group, k) for k in keys if group.setting(k) is not None]
        return ", ".join(given) or ("all" if not keys else "defaults")


def normalize_override(override: str) -> tuple[str, str]:
    """`+key=value`, `++key=value` and `~key` as (key, value): the prefix says how, not what."""
    key, _, value = override.partition("=")
    for prefix in OVERRIDE_PREFIXES:
        if key.startswith(prefix):
            key = key[len(prefix) :]
            break
    return key, value if "=" in override else "(removed)"


def reason(error: OSError) -> str:
    """An OSError's cause in words, e.g. `Permission denied`."""
    return error.strerror or str(error)


def load_yaml(path: Path, fix: str) -> Any:
    """A YAML file as plain containers, None when it does not exist; one that cannot be read or
    parsed is a ReportError naming it, with `fix` as the advice."""
    if not path.exists():
        return None
    try:
        return OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except OSError as error:
        raise ReportError(f"cannot read {path} ({reason(error)}); {fix}") from error
    except (yaml.YAMLError, UnicodeDecodeError, OmegaConfBaseException, ValueError) as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or (
            "not UTF-8 text" if isinstance(error, UnicodeDecodeError) else type(error).__name__
        )
        raise ReportError(f"{path} is not valid YAML ({problem}{where}); {fix}") from error


def load_mapping(path: Path, fix: str) -> dict[str, Any] | None:
    """A YAML file that must hold a mapping (a Hydra config)."""
    content = load_yaml(path, fix)
    if content is not None and not isinstance(content, dict):
        raise ReportError(f"{path} holds a {yaml_kind(content)}, not a mapping; {fix}")
    return content


def yaml_kind(content: Any) -> str:
    return {dict: "mapping", list: "list", str: "string"}.get(type(content), type(content).__name__)


def read_overrides(path: Path) -> list[str]:
    """A job's `.hydra/overrides.yaml`: the list of command-line overrides Hydra recorded."""
    fix = f"restore it as Hydra writes it (one `- key=value` line per override) {REMOVE_JOB}"
    overrides = load_yaml(path, fix)
    if not isinstance(overrides, list):
        kind = "is empty" if overrides in ({}, None) else f"holds a {yaml_kind(overrides)}"
        raise ReportError(f"{path} {kind}, not a list of overrides; {fix}")
    bad = [o for o in overrides if not isinstance(o, str)]
    if bad:
        raise ReportError(f"{path} holds {bad[0]!r}, not a `key=value` override; {fix}")
    return overrides


def read_metrics(path: Path) -> list[MetricsRow]:
    """metrics.csv as numbers, a row per round; a line a killed job left cut short (or garbled)
    is skipped, and so is an empty field (a test metric of a round not evaluated) or a NaN/Inf
    one (the round a run diverged in may log one)."""
    if not path.exists():
        return []
    rows: list[MetricsRow] = []
    try:
        with path.open(newline="", errors="replace") as f:
            for line in csv.DictReader(f):
                if None in line or None in line.values():
                    continue
                try:
                    numbers = {k: float(v) for k, v in line.items() if v}
                except ValueError:
                    continue
                rows.append({k: v for k, v in numbers.items() if math.isfinite(v)})
    except csv.Error:
        pass  # NUL bytes a crash left at the end: the rows before them stand
    except OSError as error:
        fix = "make it readable, or move the job directory out of the sweep"
        raise ReportError(f"cannot read {path} ({reason(error)}); {fix}") from error
    return [r for r in rows if "round" in r]


def read_summary(path: Path) -> dict[str, Any] | None:
    """summary.json, or None while the job has not finished (no file yet, or one cut short by a
    kill, said in one warning line naming the file and where its JSON breaks). Valid JSON that
    is not a summary is a ReportError naming the file."""
    fix = f"rerun the job, delete the file to list the job as incomplete, {REMOVE_JOB}"
    try:
        summary = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as error:
        print(
            f"fedlight report: warning: {path} is cut short or not JSON ({error.msg} at line "
            f"{error.lineno} column {error.colno}); its job is listed as incomplete: rerun it, "
            "or resume it from its checkpoint.pt",
            file=sys.stderr,
        )
        return None
    except (OSError, UnicodeDecodeError) as error:
        cause = reason(error) if isinstance(error, OSError) else "not UTF-8 text"
        raise ReportError(f"cannot read {path} ({cause}); {fix}") from error
    if not isinstance(summary, dict):
        kind = {list: "list", str: "string"}.get(type(summary), type(summary).__name__)
        raise ReportError(f"{path} holds a JSON {kind}, not a summary object; {fix}")
    for key in ROUND_KEYS:
        at = summary.get(key)
        if at is not None and (not isinstance(at, int) or isinstance(at, bool)):
            raise ReportError(f"{path}: {key} is {at!r}, not a round number; {fix}")
    diverged_at = summary.get(DIVERGED_KEY)
    non_finite = [f"{key}={value}" for key, value in summary.items() if not is_finite_json(value)]
    if non_finite and diverged_at is None:
        # A diverged run may hold NaN: it is left out of every statistic anyway.
        raise ReportError(
            f"{path} holds non-finite {', '.join(non_finite)} without {DIVERGED_KEY} (a run "
            f"that diverged before fedlight stopped such runs); {fix}"
        )
    return summary


def is_finite_json(value: Any) -> bool:
    """False for NaN/Inf anywhere in a JSON value (Python's json reads them)."""
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return False
    return True


def portable(override: str, cwd: str | None) -> str:
    """`key=/abs/path` (or a path alone) relative to the directory the command ran in (`cwd`,
    Hydra's hydra.runtime.cwd), which is what its user typed there (`data.root=../shared/data`):
    a report names no machine's absolute paths."""
    key, sep, value = override.partition("=") if "=" in override else ("", "", override)
    if not cwd or not value.startswith("/") or not Path(cwd).is_absolute():
        return override
    return f"{key}{sep}{os.path.relpath(value, cwd)}"


def recorded_cwd(record: dict[str, Any] | None) -> str | None:
    """hydra.runtime.cwd of a Hydra record (multirun.yaml, .hydra/hydra.yaml)."""
    cwd = ((record or {}).get("hydra") or {}).get("runtime", {}).get("cwd")
    return cwd if isinstance(cwd, str) else None


def load_job(sweep_dir: Path, job_dir: Path) -> JobResult:
    fix = f"restore Hydra's record of the job's config {REMOVE_JOB}"
    cwd = recorded_cwd(load_mapping(job_dir / ".hydra" / "hydra.yaml", fix))
    recorded = read_overrides(job_dir / ".hydra" / "overrides.yaml")
    raw_overrides = [portable(o, cwd) for o in recorded]
    config = load_mapping(job_dir / ".hydra" / "config.yaml", fix) or {}
    return JobResult(
        name=job_dir.relative_to(sweep_dir).as_posix(),
        directory=job_dir,
        overrides=dict(normalize_override(o) for o in raw_overrides),
        raw_overrides=raw_overrides,
        summary=read_summary(job_dir / "summary.json"),
        rows=read_metrics(job_dir / "metrics.csv"),
        layout=Layout.from_config(config.get("report")),
        target_accuracy=(config.get("eval") or {}).get("target_accuracy"),
    )


def load_jobs(sweep_dir: Path) -> list[JobResult]:
    if not sweep_dir.exists():
        raise ReportError(f"{sweep_dir} does not exist; {PASS_INSTEAD}")
    if not sweep_dir.is_dir():
        raise ReportError(f"{sweep_dir} is not a directory; {PASS_INSTEAD}")
    found = [d for d in job_dirs(sweep_dir) if (d / ".hydra" / "overrides.yaml").is_file()]
    if not found:
        raise ReportError(f"{sweep_dir} has no jobs (no */.hydra/overrides.yaml); {PASS_INSTEAD}")
    jobs = [load_job(sweep_dir, d) for d in found]
    return sorted(jobs, key=lambda job: job_order(job.name))


def group_jobs(jobs: list[JobResult]) -> list[Group]:
    """Finished jobs grouped by their overrides other than seed and resume, in job order."""
    groups: dict[tuple[tuple[str, str], ...], Group] = {}
    for job in jobs:
        if not job.finished:
            continue
        settings = {k: v for k, v in job.overrides.items() if k not in NOT_GROUPED}
        key = tuple(sorted(settings.items()))
        groups.setdefault(key, Group(settings, [])).jobs.append(job)
    return list(groups.values())


def varying_keys(groups: list[Group], exclude: tuple[str, ...] = ()) -> list[str]:
    """Override keys, in first-seen order, whose value is not the same in every group (a group
    that did not override a config group's choice has it in summary.json)."""
    keys = dict.fromkeys(k for g in groups for k in g.overrides if k not in exclude)
    return [k for k in keys if len({g.setting(k) for g in groups}) > 1]


def build_sections(
    groups: list[Group],
    title: str,
    metrics: tuple[str, ...] | None = None,
    x: str | None = None,
    curves: tuple[str, ...] | None = None,
) -> list[Section]:
    """One section per distinct layout, its rows defaulting to the keys the sweep varies;
    `metrics`, `x` and `curves` (from the command line) replace every layout's."""
    layouts: list[Layout] = []
    for group in groups:
        if group.jobs[0].layout not in layouts:
            layouts.append(group.jobs[0].layout)
    sections = []
    for layout in layouts:
        members = [g for g in groups if g.jobs[0].layout == layout]
        resolved = replace(
            layout,
            title=layout.title or title,
            rows=tuple(varying_keys(members)) if layout.rows is None else layout.rows,
            metrics=metrics or layout.metrics,
            x=x or layout.x,
            curves=curves or layout.curves,
        )
        extra = varying_keys(members, exclude=(*resolved.rows, *resolved.columns))
        sections.append(Section(resolved, members, extra))
    return sections


def metric_value(job: JobResult, metric: str) -> float | None:
    """A job's number for a metric: from metrics.csv for accuracy_at_<R>, loss_at_<R> and
    rounds_to_<N>, else summary.json."""
    for pattern, column in ((ACCURACY_AT, "test_accuracy"), (LOSS_AT, "test_loss")):
        at_round = pattern.fullmatch(metric)
        if at_round:
            at = int(at_round.group(1))
            matches = [r[column] for r in job.evaluated_rows if r["round"] == at and column in r]
            return matches[0] if matches else None
    to_percent = ROUNDS_TO.fullmatch(metric)
    if to_percent:
        target = float(to_percent.group(1)) / 100
        reached = (r["round"] for r in job.evaluated_rows if r["test_accuracy"] >= target)
        return next((float(r) for r in reached), None)
    value = (job.summary or {}).get(metric)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def metric_values(group: Group, metric: str) -> list[float]:
    """The metric's values over the group's healthy seeds (a diverged seed's numbers are not
    results)."""
    values = (metric_value(job, metric) for job in group.healthy)
    return [v for v in values if v is not None]


def is_accuracy(metric: str) -> bool:
    """Whether the metric is a fraction shown in percent."""
    return (
        metric in ("final_accuracy", "best_accuracy", "test_accuracy_at_best", "val_accuracy")
        or metric.startswith("local_accuracy_")
        or bool(ACCURACY_AT.fullmatch(metric))
    )


def metric_title(metric: str, groups: list[Group]) -> str:
    """The column's title; ", validation" in it where every job's number comes from the
    validation set (summary.json's `splits`, `eval.split=validation`)."""
    title = test_metric_title(metric, groups)
    splits = {
        (job.summary.get("splits") or {}).get(metric)
        for group in groups
        for job in group.jobs
        if job.summary is not None
    }
    if splits != {"validation"}:
        return title
    base, percent, _ = title.partition(" (%)")
    return f"{base}, validation{percent}"


def test_metric_title(metric: str, groups: list[Group]) -> str:
    at_round = ACCURACY_AT.fullmatch(metric)
    if at_round:
        return f"Accuracy at round {at_round.group(1)} (%)"
    loss_at = LOSS_AT.fullmatch(metric)
    if loss_at:
        return f"Test loss at round {loss_at.group(1)}"
    to_percent = ROUNDS_TO.fullmatch(metric)
    if to_percent:
        return f"Rounds to {to_percent.group(1)}%"
    if metric in TO_TARGET_TITLES:
        targets = {j.target_accuracy for g in groups for j in g.jobs}
        if len(targets) == 1 and None not in targets:
            return f"{TO_TARGET_TITLES[metric]} {100 * float(targets.pop()):g}%"
        return f"{TO_TARGET_TITLES[metric]} target"
    return METRIC_TITLES.get(metric, metric)


def mean_and_std(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and sample std (ddof=1); std is None below two values."""
    if not values:
        return None, None
    std = statistics.stdev(values) if len(values) >= 2 else None
    return statistics.fmean(values), std


def format_cell(values: list[float], n: int, metric: str) -> str:
    """`mean ± std`, accuracies in percent; `(k/n)` when only k of the n seeds have a value."""
    if not values:
        return MISSING
    scale = 100.0 if is_accuracy(metric) else 1.0
    mean, std = mean_and_std([v * scale for v in values])
    rounds = metric == "rounds_to_target" or ROUNDS_TO.fullmatch(metric)
    decimals = 0 if rounds and len(values) == 1 else DECIMALS.get(metric, 1)
    if LOSS_AT.fullmatch(metric):
        decimals = 3  # a cross-entropy
    text = f"{mean:.{decimals}f}" + ("" if std is None else f" ± {std:.{decimals}f}")
    return text if len(values) == n else f"{text} ({len(values)}/{n})"


def diverged_marker(group: Group) -> str:
    """`† 1 of 3 diverged`: how many of the group's seeds its cells leave out."""
    return f"{DIVERGED_MARK} {len(group.diverged)} of {group.n} diverged"


def collapsed_marker(group: Group) -> str:
    """`‡ 1 of 3 collapsed`: how many of the seeds its cells average fell to chance."""
    return f"{COLLAPSED_MARK} {len(group.collapsed)} of {group.n} collapsed"


def never_marker(group: Group) -> str:
    """`§ 1 of 3 never left chance`: how many of the seeds its cells average never learned."""
    return f"{NEVER_MARK} {len(group.never_learned)} of {group.n} never left chance"


def markers(group: Group) -> str:
    """The group's diverged, collapsed and never-learned markers, where it has such seeds."""
    return " ".join(
        marker(group)
        for marker, jobs in (
            (diverged_marker, group.diverged),
            (collapsed_marker, group.collapsed),
            (never_marker, group.never_learned),
        )
        if jobs
    )


def cell(group: Group | None, metric: str) -> str:
    """The healthy seeds' `mean ± std`, followed by the diverged and collapsed markers when some
    diverged or collapsed; only the markers when all diverged."""
    if group is None:
        return MISSING
    healthy = len(group.healthy)
    text = format_cell(metric_values(group, metric), healthy, metric) if healthy else ""
    return f"{text} {markers(group)}".strip()


def markdown_table(header: list[str], body: list[list[str]], text_columns: int = 1) -> list[str]:
    """A GitHub table; columns after the first `text_columns` hold numbers and align right."""

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    align = ["---"] * text_columns + ["---:"] * (len(header) - text_columns)
    return [line(header), line(align), *(line(r) for r in body)]


def row_header(section: Section) -> str:
    return ", ".join(section.row_keys) or "group"


def plain_table(section: Section) -> list[str]:
    metrics = section.layout.metrics
    header = [row_header(section), *(metric_title(m, section.groups) for m in metrics)]
    body = [[section.row_label(g), *(cell(g, m) for m in metrics)] for g in section.groups]
    return markdown_table(header, body)


def transposed_table(section: Section) -> list[str]:
    header = ["Metric", *(section.group_label(g) for g in section.groups)]
    body = [
        [metric_title(m, section.groups), *(cell(g, m) for g in section.groups)]
        for m in section.layout.metrics
    ]
    return markdown_table(header, body)


def pivot_table(section: Section, metric: str) -> list[str]:
    """Rows by the layout's `rows` keys, one column per value of its `columns` keys."""
    row_labels = list(dict.fromkeys(section.row_label(g) for g in section.groups))
    column_labels = list(dict.fromkeys(section.column_label(g) for g in section.groups))
    by_cell = {(section.row_label(g), section.column_label(g)): g for g in section.groups}
    body = [[r, *(cell(by_cell.get((r, c)), metric) for c in column_labels)] for r in row_labels]
    return markdown_table([row_header(section), *column_labels], body)


def seeds_note(section: Section) -> str:
    """Says how many seeds each cell averages, naming the groups that differ from the rest."""
    counts = Counter(g.n for g in section.groups)
    usual = counts.most_common(1)[0][0]
    others = [f"{section.group_label(g)}: n = {g.n}" for g in section.groups if g.n != usual]
    exceptions = f" (except {'; '.join(others)})" if others else ""
    return f"mean ± std over seeds; n = {plural(usual, 'seed')} per cell{exceptions}"


def divergence_cause(job: JobResult) -> str:
    """` (test_loss nan)`: what the run found not finite, when its summary says."""
    cause = (job.summary or {}).get("divergence")
    return f" ({cause})" if isinstance(cause, str) and cause else ""


def job_footnote(
    section: Section,
    title: str,
    jobs_of: Callable[[Group], list[JobResult]],
    what: Callable[[JobResult], str],
) -> list[str]:
    """`title`, then each of the section's jobs `jobs_of` picks: its directory, group, seed and
    `what` happened to it; nothing when there is none."""
    entries = [
        f"- {job.name} ({section.group_label(group)}, seed {job.setting('seed') or MISSING}): "
        f"{what(job)}"
        for group in section.groups
        for job in jobs_of(group)
    ]
    return [title, "", *entries, ""] if entries else []


def diverged_footnote(section: Section) -> list[str]:
    """Each diverged job of the section, with its round."""
    return job_footnote(
        section,
        f"{DIVERGED_MARK} Diverged (loss or weights became NaN/Inf), left out of mean ± std:",
        lambda group: group.diverged,
        lambda job: f"diverged at round {job.diverged_at_round}{divergence_cause(job)}",
    )


def collapsed_footnote(section: Section) -> list[str]:
    """Each collapsed job of the section, with its round and final accuracy."""
    return job_footnote(
        section,
        f"{COLLAPSED_MARK} Collapsed (test accuracy fell to chance with finite losses and "
        "stayed there to the end), kept in mean ± std:",
        lambda group: group.collapsed,
        lambda job: f"collapsed at round {job.collapsed_at_round}{final_accuracy_text(job)}",
    )


def never_footnote(section: Section) -> list[str]:
    """Each job of the section that never left chance, with its final accuracy."""
    return job_footnote(
        section,
        f"{NEVER_MARK} Never left chance (every evaluation at chance accuracy with finite losses: "
        "it never learned), kept in mean ± std:",
        lambda group: group.never_learned,
        lambda job: f"never left chance{final_accuracy_text(job)}",
    )


def final_accuracy_text(job: JobResult) -> str:
    """` (final accuracy 10.0%)`, when its summary has it."""
    final = metric_value(job, "final_accuracy")
    return "" if final is None else f" (final accuracy {100 * final:.1f}%)"


def environment_values(jobs: list[JobResult], key: str) -> dict[str, list[JobResult]]:
    """The jobs by their value of one environment key, as text (`unknown` where a summary does
    not record it; the values of a resumed run that changed joined by `, then `)."""
    by_value: dict[str, list[JobResult]] = {}
    for job in jobs:
        value = job.environment.get(key, UNKNOWN)
        text = ", then ".join(map(str, value)) if isinstance(value, list) else str(value)
        by_value.setdefault(text, []).append(job)
    return by_value


def environment_keys(jobs: list[JobResult]) -> list[str]:
    return list(dict.fromkeys(key for job in jobs for key in job.environment))


def environment_line(jobs: list[JobResult]) -> str:
    """The report's one line on what decided the float results: each key's value where the
    finished jobs that record it agree (keys null everywhere left out), `varies` where not."""
    finished = [job for job in jobs if job.finished]
    known = [job for job in finished if job.environment]
    if not known:
        return f"Environment: {UNKNOWN} ({OLDER_SUMMARY})."
    parts = []
    for key in environment_keys(known):
        values = environment_values(known, key)
        if len(values) > 1:
            why = "with the cells' settings" if key in CELL_DECIDED else "see the tables' warnings"
            parts.append(f"{key} varies ({why})")
        elif list(values) != ["None"]:
            parts.append(f"{key}={next(iter(values))}")
    unknown = len(finished) - len(known)
    rest = f"; {UNKNOWN} for {plural(unknown, 'job')} ({OLDER_SUMMARY})" if unknown else ""
    return f"Environment (what decides float rounding): {', '.join(parts)}{rest}."


def reproduction_line(jobs: list[JobResult]) -> str:
    """What to add to the page's commands to get its numbers digit for digit under today's
    defaults, which choose the layout and threads per machine (`fl.memory_format=auto`,
    `fl.workers=auto`): the layout and torch threads per worker the jobs ran with. The number of
    workers changes no number at equal threads per worker (docs/concepts/workers.md)."""
    finished = [job for job in jobs if job.finished]
    layouts = sorted({str(job.environment.get("memory_format", LAYOUT_BEFORE)) for job in finished})
    threads = sorted({str(job.environment.get("torch_threads", UNKNOWN)) for job in finished})
    settings = [f"fl.memory_format={layouts[0]}"] if len(layouts) == 1 else []
    if threads == [UNKNOWN]:
        threads_note = (
            "; their torch threads are unknown (summary.json written before fedlight recorded "
            "them): give fl.threads_per_worker the threads they had (a job of the basic launcher "
            "took its process's, i.e. the machine's cores)"
        )
    elif len(threads) == 1:
        settings.append(f"fl.threads_per_worker={threads[0]}")
        threads_note = ""
    else:
        threads_note = "; their torch threads vary: take each job's from its summary.json"
    layout_note = "" if len(layouts) == 1 else "; their layouts vary: see each job's summary.json"
    added = f"`{' '.join(settings)}`" if settings else "each job's layout and threads"
    return (
        f"Digit for digit: add {added} to the commands above (the layout and torch threads per "
        f"worker these jobs ran with){layout_note}{threads_note}, on a CPU with the same "
        "cpu_capability and the same torch (the environment above); another CPU or torch gives "
        "the same results within seed noise, not the same digits."
    )


def environment_warning(section: Section) -> str | None:
    """A warning when the jobs of the section's tables differ in what decides float rounding,
    naming the values and a few jobs of each, or some record it and others do not; None when
    neither."""
    jobs = [job for group in section.groups for job in group.jobs]
    known = [job for job in jobs if job.environment]
    differences = []
    for key in environment_keys(known):
        values = environment_values(known, key)
        if len(values) > 1 and (key not in CELL_DECIDED or cells_differ_within(section, key)):
            listed = "; ".join(f"{value}: {jobs_text(named)}" for value, named in values.items())
            differences.append(f"{key} ({listed})")
    faults = [f"jobs ran under different {', '.join(differences)}"] if differences else []
    unrecorded = [job for job in jobs if not job.environment]
    if known and unrecorded:
        faults.append(f"{jobs_text(unrecorded)} recorded none ({OLDER_SUMMARY})")
    if not faults:
        return None
    return (
        f"Warning, this table: {'; '.join(faults)}. Float rounding may differ between its jobs; "
        "each reproduces bit for bit only under its own values (docs/reproducibility.md)."
    )


def cells_differ_within(section: Section, key: str) -> bool:
    """Whether the seeds of some cell of the section differ in an environment key."""
    return any(
        len(environment_values([job for job in group.jobs if job.environment], key)) > 1
        for group in section.groups
    )


def jobs_text(jobs: list[JobResult]) -> str:
    """`jobs 0, 1, 2 and 5 more`."""
    names = ", ".join(job.name for job in jobs[:NAMED_JOBS])
    more = f" and {len(jobs) - NAMED_JOBS} more" if len(jobs) > NAMED_JOBS else ""
    return f"job{'s' if len(jobs) > 1 else ''} {names}{more}"


def section_markdown(section: Section) -> list[str]:
    layout = section.layout
    if layout.columns and not layout.transpose:
        tables = [
            (f"{layout.title}: {metric_title(m, section.groups)}", pivot_table(section, m))
            for m in layout.metrics
        ]
    else:
        table = transposed_table(section) if layout.transpose else plain_table(section)
        tables = [(layout.title or "", table)]
    lines = []
    for title, table in tables:
        lines += [f"### {title}", "", seeds_note(section), "", *table, ""]
    warning = environment_warning(section)
    lines += [warning, ""] if warning else []
    lines += diverged_footnote(section)
    lines += collapsed_footnote(section)
    lines += never_footnote(section)
    if layout.reference:
        lines += [f"Reference: {layout.reference}", ""]
    return lines


def sweep_command(sweep_dir: Path) -> str | None:
    """The command that made the sweep (or the single run), rebuilt from Hydra's record of its
    task overrides."""
    for record, command in (
        (sweep_dir / "multirun.yaml", "python -m fedlight -m"),
        (sweep_dir / ".hydra" / "hydra.yaml", "python -m fedlight"),
    ):
        fix = "restore it, or delete it to report the command as unknown"
        config = load_mapping(record, fix)
        if config is not None:
            hydra = config.get("hydra") or {}
            overrides = hydra.get("overrides", {}).get("task") or []
            cwd = recorded_cwd(config)
            flags = [portable(f, cwd) for f in command_flags(hydra) if f != "-m"]
            arguments = [*flags, *(portable(str(o), cwd) for o in overrides)]
            return " ".join([command, *(shlex.quote(a) for a in arguments)])
    return None


def resumes_line(jobs: list[JobResult]) -> str:
    """How often each finished job was continued from a checkpoint (summary.json `resumes`): a
    resumed job gives the uninterrupted run's numbers, and a page says so with the counts."""
    counts = [(j.name, int(j.summary.get("resumes") or 0)) for j in jobs if j.summary is not None]
    resumed = [f"{name} {plural(count, 'time')}" for name, count in counts if count]
    if not resumed:
        return f"Resumed: none of the {plural(len(counts), 'finished job')}."
    rest = f"; the other {len(counts) - len(resumed)} never" if len(resumed) < len(counts) else ""
    return f"Resumed from their checkpoints: {', '.join(resumed)}{rest}."


def incomplete_markdown(jobs: list[JobResult]) -> list[str]:
    """Unfinished jobs with the overrides that set them apart and how far they got."""
    shared = set.intersection(*(set(j.raw_overrides) for j in jobs)) if len(jobs) > 1 else set()
    unfinished = [j for j in jobs if not j.finished]
    body = []
    for job in unfinished:
        own = [o for o in job.raw_overrides if o not in shared] or job.raw_overrides
        last_round = str(int(job.rows[-1]["round"])) if job.rows else "none logged"
        state = job_state(job.directory)
        status = f"{state.status} (preempted)" if state.preempted else str(state.status)
        body.append([job.name, " ".join(own), status, last_round])
    header = ["job", "overrides", "state", "last round in metrics.csv"]
    return [
        "### Incomplete jobs",
        "",
        *markdown_table(header, body, text_columns=3),
        "",
        "Stopped and preempted jobs continue from their checkpoints with `fedlight resume "
        "<sweep dir>` (the sweep's command with `resume=auto`).",
        "",
    ]


def write_markdown(
    output_dir: Path,
    display_name: str,
    sweep_dirs: list[Path],
    jobs: list[JobResult],
    sections: list[Section],
) -> Path:
    lines = [f"# Report: {display_name}", ""]
    for sweep_dir in sweep_dirs:
        command = sweep_command(sweep_dir)
        if command is None:
            lines += [f"Command: unknown (no multirun.yaml or .hydra/ in {sweep_dir}).", ""]
        else:
            lines += ["```bash", command, "```", ""]
    if sections:
        lines += [environment_line(jobs), "", reproduction_line(jobs), "", resumes_line(jobs), ""]
    for section in sections:
        lines += section_markdown(section)
    if not sections:
        lines += ["No job has finished yet.", ""]
    if any(not j.finished for j in jobs):
        lines += incomplete_markdown(jobs)
    if sections:
        lines += ["![curves](curves.png)", ""]
    lines += studies_markdown(sweep_dirs, output_dir)
    path = output_dir / "report.md"
    path.write_text("\n".join(lines))
    return path


def write_csv(output_dir: Path, sections: list[Section]) -> None:
    """One row per group: its overrides, n (the seeds its statistics are over), diverged (the
    seeds left out because they diverged), collapsed (those of the n that collapsed),
    never_left_chance (those of the n that never learned), and mean/std of every metric in raw
    units."""
    groups = [(s, g) for s in sections for g in s.groups]
    keys = list(dict.fromkeys(k for _, g in groups for k in g.overrides))
    metrics = list(
        dict.fromkeys([*DEFAULT_METRICS, *(m for s in sections for m in s.layout.metrics)])
    )
    stats = [f"{m}_{part}" for m in metrics for part in ("mean", "std")]
    with (output_dir / "report.csv").open("w", newline="") as f:
        fieldnames = ["group", *keys, "n", "diverged", "collapsed", NEVER_KEY, *stats]
        writer = csv.DictWriter(f, fieldnames=fieldnames)
        writer.writeheader()
        for section, group in groups:
            row: dict[str, Any] = {"group": section.group_label(group), **group.overrides}
            row["n"] = len(group.healthy)
            row["diverged"] = len(group.diverged)
            row["collapsed"] = len(group.collapsed)
            row[NEVER_KEY] = len(group.never_learned)
            for metric in metrics:
                mean, std = mean_and_std(metric_values(group, metric))
                row[f"{metric}_mean"] = "" if mean is None else mean
                row[f"{metric}_std"] = "" if std is None else std
            writer.writerow(row)


def column_points(job: JobResult, column: str = "test_accuracy") -> dict[int, float]:
    """A job's metrics.csv column by evaluated round (accuracies in percent); a diverged job's
    only before it diverged (its NaN/Inf fields are already gone)."""
    last = math.inf if job.diverged_at_round is None else job.diverged_at_round
    scale = 100.0 if column.endswith("accuracy") else 1.0
    return {
        int(r["round"]): scale * r[column]
        for r in job.evaluated_rows
        if r["round"] < last and column in r
    }


def curve_jobs(group: Group) -> list[JobResult]:
    """The seeds a group's curve is over: the healthy ones, or the diverged ones until they
    diverged when none is healthy."""
    return group.healthy or group.jobs


def column_curve(
    group: Group, column: str = "test_accuracy"
) -> tuple[list[int], list[list[float]]]:
    """The rounds every seed of the curve evaluated, and each seed's value of `column` there
    (accuracies in percent)."""
    per_job = [column_points(job, column) for job in curve_jobs(group)]
    rounds = sorted(set.intersection(*(set(points) for points in per_job)))
    return rounds, [[points[r] for points in per_job] for r in rounds]


def mean_virtual_times(group: Group, rounds: list[int]) -> list[float]:
    """The seeds' mean virtual time (`system`) at each of `rounds`: a curve's x on the clock."""
    times = [
        {int(r["round"]): float(r["virtual_time"]) for r in job.rows if "virtual_time" in r}
        for job in curve_jobs(group)
    ]
    return [statistics.fmean(t[r] for t in times) for r in rounds]


def write_curves(output_dir: Path, title: str, sections: list[Section]) -> None:
    """Each group's mean over its seeds, with a ± std band where it has several: one panel per
    column the layouts' `curves` name (the test accuracy by default)."""
    columns = list(dict.fromkeys(c for section in sections for c in section.layout.curves))
    panels = [column_panel(column, title, sections) for column in columns]
    for panel in panels[1:]:  # stacked under the first, which names them
        panel.title = None
    curves.write_curves(output_dir / "curves.png", panels, 7, 120, stacked=len(panels) > 1)


def column_panel(column: str, title: str, sections: list[Section]) -> Panel:
    """One column's curves, a line per group (accuracies clipped to [0, 100] in the band: a
    diverged seed makes the std huge)."""
    accuracy = column.endswith("accuracy")
    lines = []
    for section in sections:
        for group in section.groups:
            rounds, values = column_curve(group, column)
            xs = mean_virtual_times(group, rounds) if section.layout.x == "virtual_time" else rounds
            means = [statistics.fmean(v) for v in values]
            band = None
            if len(curve_jobs(group)) >= 2:
                stds = [statistics.stdev(v) for v in values]
                low, high = (0.0, 100.0) if accuracy else (-math.inf, math.inf)
                band = (
                    [max(low, m - s) for m, s in zip(means, stds, strict=True)],
                    [min(high, m + s) for m, s in zip(means, stds, strict=True)],
                )
            label = section.group_label(group)
            if markers(group):
                label += f" ({markers(group)})"
            lines.append(Line(label, xs, means, band))
    banded = any(len(curve_jobs(g)) >= 2 for s in sections for g in s.groups)
    on_clock = any(section.layout.x == "virtual_time" for section in sections)
    return Panel(
        f"{column.replace('_', ' ')}{' (%)' if accuracy else ''}",
        lines,
        title,
        "mean over seeds, band ± std" if banded else None,
        "virtual time (s), mean over seeds" if on_clock else "round",
        log_y=column.endswith("loss"),
    )


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def parse_where(conditions: list[str]) -> dict[str, str]:
    pairs = [normalize_override(c) for c in conditions]
    bad = [c for c, (_, value) in zip(conditions, pairs, strict=True) if "=" not in c or not value]
    if bad:
        raise ReportError(f"--where {bad[0]} is not KEY=VALUE; e.g. --where partition=shards")
    return dict(pairs)


def select_jobs(args: argparse.Namespace) -> list[JobResult]:
    """The jobs of every sweep directory that match all `--where` conditions; a killed job that
    another one resumed (`resume=<its directory>`) is left out, its resumption counts instead."""
    where = parse_where(args.where)
    several = len(args.sweep_dirs) > 1
    jobs = []
    for sweep_dir in args.sweep_dirs:
        for job in load_jobs(sweep_dir):
            if all(job.setting(key) == value for key, value in where.items()):
                jobs.append(replace(job, name=f"{sweep_dir.name}/{job.name}") if several else job)
    if not jobs:
        raise ReportError(f"no job matches --where {' '.join(args.where)}; check the values")
    resumed = {Path(j.overrides["resume"]).resolve() for j in jobs if "resume" in j.overrides}
    return [j for j in jobs if j.finished or j.directory.resolve() not in resumed]


def shown_path(sweep_dir: Path, output_dir: Path) -> str:
    """A sweep directory as a report names it: relative to the report's directory where it lies
    inside it, else by its name (never a machine's absolute path)."""
    relative = os.path.relpath(sweep_dir.resolve(), output_dir.resolve())
    return sweep_dir.resolve().name if relative.startswith("..") or relative == "." else relative


def output_dir_of(args: argparse.Namespace) -> Path:
    """Where the report goes, made if missing and checked writable before any work."""
    if args.output is None and len(args.sweep_dirs) > 1:
        raise ReportError("several sweep directories need --output DIR for the report files")
    if args.output is None:
        where = f"the sweep directory {args.sweep_dirs[0]}"
        fix = "pass -o DIR to write the report elsewhere"
    else:
        where = f"-o {args.output}"
        fix = "pass -o with a directory you can write to (it is made if missing)"
    output_dir = args.sweep_dirs[0] if args.output is None else args.output
    if output_dir.exists() and not output_dir.is_dir():
        raise ReportError(f"{where} is a file, not a directory; {fix}")
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        # The directory on the way that could not be made, when it is not the last one.
        blocker = f": {error.filename}" if error.filename not in (None, str(output_dir)) else ""
        raise ReportError(f"cannot make {where} ({reason(error)}{blocker}); {fix}") from error
    try:
        with tempfile.NamedTemporaryFile(dir=output_dir, prefix=".fedlight-report-"):
            pass
    except OSError as error:
        raise ReportError(f"cannot write to {where} ({reason(error)}); {fix}") from error
    return output_dir


def parse_metrics(text: str | None) -> tuple[str, ...] | None:
    """`--metrics a,b` as names; None (each layout's own) when not given."""
    return parse_names(text, "--metrics", "final_accuracy,comm_mb")


def parse_names(text: str | None, flag: str, example: str) -> tuple[str, ...] | None:
    """A comma-separated flag's names; None (each layout's own) when not given."""
    if not text:
        return None
    names = tuple(name.strip() for name in text.split(","))
    if not all(names):
        raise ReportError(f"{flag} {text} has an empty name; e.g. {flag} {example}")
    return names


def available_metrics(jobs: list[JobResult]) -> tuple[list[str], list[int]]:
    """The summary.json numbers the finished jobs have (the defaults first), and the rounds their
    metrics.csv evaluated (for accuracy_at_<R>)."""
    finished = [job for job in jobs if job.finished]
    numeric = [
        key
        for job in finished
        for key, value in (job.summary or {}).items()
        if key not in NOT_METRICS
        and (value is None or (isinstance(value, int | float) and not isinstance(value, bool)))
    ]
    present = [m for m in DEFAULT_METRICS if m in numeric]
    names = list(dict.fromkeys([*present, *numeric]))
    rounds = sorted({int(row["round"]) for job in finished for row in job.evaluated_rows})
    return names, rounds


def rounds_text(rounds: list[int]) -> str:
    if rounds == list(range(rounds[0], rounds[-1] + 1)) and len(rounds) > 2:
        return f"{rounds[0]}..{rounds[-1]}"
    if len(rounds) <= 4:
        return ", ".join(map(str, rounds))
    return f"{rounds[0]}, {rounds[1]}, …, {rounds[-1]}"


def check_metrics(metrics: tuple[str, ...] | None, jobs: list[JobResult]) -> None:
    """Refuses a `--metrics` name that no finished job has (it would be a column of dashes)."""
    if metrics is None or not any(job.finished for job in jobs):
        return
    names, rounds = available_metrics(jobs)
    choices = ", ".join(names)
    if rounds:
        choices += (
            f", accuracy_at_<R> and loss_at_<R> (R = {rounds_text(rounds)}), rounds_to_<percent>"
        )
    for metric in metrics:
        at_round = ACCURACY_AT.fullmatch(metric) or LOSS_AT.fullmatch(metric)
        if at_round and int(at_round.group(1)) not in rounds:
            raise ReportError(
                f"--metrics {metric}: no job evaluated round {at_round.group(1)} (a test_accuracy "
                "in its metrics.csv); "
                f"the sweep's jobs have {choices}"
            )
        computed = at_round or (ROUNDS_TO.fullmatch(metric) and rounds)
        if not computed and metric not in DEFAULT_METRICS and metric not in names:
            raise ReportError(
                f"--metrics {metric}: no job of the sweep has this metric; "
                f"the sweep's jobs have {choices}"
            )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="fedlight report",
        description="Tables (mean ± std over seeds), report.csv and curves.png for sweeps.",
    )
    parser.add_argument("sweep_dirs", type=Path, nargs="+", help="Hydra multirun directories")
    parser.add_argument("-o", "--output", type=Path, help="where to write (default: the sweep)")
    parser.add_argument(
        "--where", action="append", default=[], metavar="KEY=VALUE", help="keep matching jobs"
    )
    parser.add_argument("--metrics", help="comma-separated metrics instead of the layout's")
    parser.add_argument("--title", help="table title when the sweep has no preset layout")
    parser.add_argument(
        "--curves", help="comma-separated metrics.csv columns drawn, one panel each (test_loss)"
    )
    parser.add_argument(
        "--x",
        choices=("round", "virtual_time"),
        help="the curves' x axis instead of the layout's (virtual_time: runs with a system model)",
    )
    args = parser.parse_args(argv)
    try:
        report(args)
    except (ReportError, ConfigError) as error:  # ConfigError: a study's storage (study_report)
        print(f"{ERROR_PREFIX}{error}", file=sys.stderr)
        return 2
    return 0


def report(args: argparse.Namespace) -> None:
    """The report of the parsed command line; every fault of the input is a ReportError."""
    metrics = parse_metrics(args.metrics)
    jobs = select_jobs(args)
    check_metrics(metrics, jobs)
    output_dir = output_dir_of(args)
    shown = [shown_path(d, output_dir) for d in args.sweep_dirs]
    if len(set(shown)) < len(shown):  # several `tested` sweeps: each with its study's name
        shown = [
            f"{d.resolve().parent.name}/{name}"
            for d, name in zip(args.sweep_dirs, shown, strict=True)
        ]
    display_name = " + ".join(shown)
    title = args.title or "Sweep " + " + ".join(d.resolve().name for d in args.sweep_dirs)
    curves = parse_names(args.curves, "--curves", "test_accuracy,test_loss")
    sections = build_sections(group_jobs(jobs), title, metrics, args.x, curves)
    unclocked = [
        job.directory
        for section in sections
        if section.layout.x == "virtual_time"
        for group in section.groups
        for job in curve_jobs(group)
        if any("virtual_time" not in row for row in job.rows)
    ]
    if unclocked:
        raise ReportError(
            f"{unclocked[0]} has no virtual_time column (it ran without a system model); "
            "draw its curves against rounds (--x round)"
        )
    try:
        path = write_markdown(output_dir, display_name, args.sweep_dirs, jobs, sections)
        write_csv(output_dir, sections)
        if sections:
            write_curves(output_dir, args.title or display_name, sections)
    except OSError as error:
        written = error.filename or output_dir
        raise ReportError(f"cannot write {written} ({reason(error)}); pass -o DIR") from error
    finished = sum(job.finished for job in jobs)
    groups = [g for s in sections for g in s.groups]
    marked = [(sum(len(g.diverged) for g in groups), "diverged")]
    marked.append((sum(len(g.collapsed) for g in groups), "collapsed"))
    marked.append((sum(len(g.never_learned) for g in groups), "never left chance"))
    print(path)
    print(
        f"{plural(finished, 'job')} in {plural(len(groups), 'group')}, "
        f"{len(jobs) - finished} incomplete"
        + "".join(f", {count} {what}" for count, what in marked if count)
    )
    for section in sections:
        if environment_warning(section):
            print(
                f"fedlight report: warning: the jobs of table {section.layout.title!r} differ "
                "in what decides float rounding (see report.md)",
                file=sys.stderr,
            )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
