"""The report's data types: a job directory as read (`JobResult`), the finished seeds of one
cell (`Group`) and the groups one table lays out (`Section`, in a preset's `Layout`), with the
summary.json keys they read and the error that every fault of a report's input is."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedlight.loggers.base import MetricsRow, evaluated

DEFAULT_METRICS = (
    "final_accuracy",
    "best_accuracy",
    "rounds_to_target",
    "comm_mb",
    "client_seconds_per_round",
    "wall_seconds",
)
MISSING = "—"
DIVERGED_KEY = "diverged_at_round"
NEVER_KEY = "never_left_chance"
COLLAPSED_KEY = "collapsed_at_round"
ROUND_KEYS = (DIVERGED_KEY, COLLAPSED_KEY)
ENVIRONMENT_KEY = "environment"


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
    # paired differences of cells sharing their seeds, each `KEY=A,B` (fedlight.reports.paired)
    compare: tuple[str, ...] = ()
    ci: str = "t"  # the 95% interval of a cell's mean: t (Student), or bootstrap
    # published numbers the cells are decided against (fedlight.reports.published)
    published: dict[str, Any] | None = None

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
            compare=as_keys(section.get("compare")),
            ci=str(section.get("ci", "t")),
            published=section.get("published"),
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
        """A key's value from the command line, else the config group it chose, else the value
        its resolved config held (summary.json's `config`: a preset's or a default's, so that a
        cell that kept `data.statistics=dataset` pairs with one that set `half`), else None."""
        if key in self.overrides:
            return self.overrides[key]
        summary = self.summary or {}
        if summary.get(key) is not None:
            return str(summary[key])
        return config_text(dotted_value(summary.get("config"), key))


def dotted_value(config: Any, key: str) -> Any:
    """`data.statistics` of a resolved config (nested mappings); None where it has no such key."""
    for part in key.split("."):
        if not isinstance(config, dict):
            return None
        config = config.get(part)
    return config


def config_text(value: Any) -> str | None:
    """A config value as the command line writes it (`true`, `0.1`); None for none, or for a
    mapping or list (a node, not a setting)."""
    if value is None or isinstance(value, dict | list):
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass
class Group:
    """Finished jobs with the same overrides apart from the seed and those that only say how a
    run is written or shown (`output_only`)."""

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


def reason(error: OSError) -> str:
    """An OSError's cause in words, e.g. `Permission denied`."""
    return error.strerror or str(error)


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"
