"""The lines a report prints beside its tables: how many seeds a cell averages, footnotes naming
the jobs that diverged, collapsed or never left chance, the environment the jobs ran in (and a
warning where a table's jobs differ in it), what reproduces the numbers digit for digit, and which
jobs were resumed."""

from collections import Counter
from collections.abc import Callable

from fedlight.reports.cells import COLLAPSED_MARK, DIVERGED_MARK, NEVER_MARK, metric_value
from fedlight.reports.model import MISSING, Group, JobResult, Section, plural

UNKNOWN = "unknown"
NAMED_JOBS = 3  # jobs named per value in a warning that jobs differ in their environment
# Environment keys a cell's own settings decide (DP-SGD trains with its own engine): a table whose
# cells differ in them is no warning, only a cell whose seeds do.
CELL_DECIDED = ("engine", "memory_format")
# The layout of every run before `fl.memory_format` existed (a summary that does not record it).
LAYOUT_BEFORE = "contiguous"
OLDER_SUMMARY = "summary.json written before fedlight recorded it"


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


def resumes_line(jobs: list[JobResult]) -> str:
    """How often each finished job was continued from a checkpoint (summary.json `resumes`): a
    resumed job gives the uninterrupted run's numbers, and a page says so with the counts."""
    counts = [(j.name, int(j.summary.get("resumes") or 0)) for j in jobs if j.summary is not None]
    resumed = [f"{name} {plural(count, 'time')}" for name, count in counts if count]
    if not resumed:
        return f"Resumed: none of the {plural(len(counts), 'finished job')}."
    rest = f"; the other {len(counts) - len(resumed)} never" if len(resumed) < len(counts) else ""
    return f"Resumed from their checkpoints: {', '.join(resumed)}{rest}."
