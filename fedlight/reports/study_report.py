"""`fedlight report` of a study (`hydra/sweeper=optuna`, fedlight/runs/optuna_sweeper.py): per
study, the best parameters and the value they reached (a study of several objectives: its Pareto
front, the trials no other trial beats in every objective), every trial (its parameters, values, and
what happened to it), the importance of each parameter (Optuna's mean decrease in impurity of a
random forest fitted to the trials: Breiman 2001), and the trial history as a plot (the objective
against the trial, with the best so far, and against each parameter; several objectives: the first
two against each other, the front drawn). optuna is imported only when a report has a study to read.
The study is the sweep directory's `optuna.db` (SQLite) or `optuna_journal.log` (Optuna's journal
file, `hydra.sweeper.storage=journal`).
"""

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fedlight.core.errors import ConfigError, one_line, require
from fedlight.reports import curves
from fedlight.store.run_files import JOURNAL_FILE, STUDY_FILE, STUDY_NAME

# What to do with a study file Optuna cannot read, in a sweep and in a report.
AFRESH = "move it away to begin the study afresh (its trials' directories stay)"
WITHOUT = "move it away to report the sweep without its study"
# A trial's user attribute: what happened to it, as fedlight's sweeper told it
NOTE_ATTR = "fedlight.note"
# A trial's user attribute: the round at which the study's pruner stopped its run
PRUNED_ATTR = "fedlight.pruned_at_round"


def has_study(sweep_dir: Path) -> bool:
    return study_file(sweep_dir) is not None


def study_file(sweep_dir: Path) -> Path | None:
    """The sweep directory's study: its SQLite file, or its journal file."""
    found = [sweep_dir / name for name in (STUDY_FILE, JOURNAL_FILE)]
    return next((path for path in found if path.is_file()), None)


@contextmanager
def study_read(where: str, fix: str) -> Iterator[None]:
    """Optuna reading the study at `where` (its file, or a storage URL): a storage that holds no
    study Optuna can read (cut short, overwritten) is one line naming it and `fix`, not a
    traceback."""
    from sqlalchemy.exc import SQLAlchemyError

    try:
        yield
    except SQLAlchemyError as error:
        raise ConfigError(
            f"{where} is not a readable Optuna study ({str(error).splitlines()[0]}); {fix}"
        ) from None
    except RuntimeError as error:  # a study another optuna wrote (optuna 2's: upgrade it)
        if "table schema" not in str(error):
            raise
        url = where if "://" in where else f"sqlite:///{where}"
        said = str(error).replace("$STORAGE_URL", url).replace("`$ ", "`")
        raise ConfigError(f"{where} is an Optuna study of another version: {said}") from None
    except ConfigError:
        raise
    except (ValueError, UnicodeDecodeError) as error:  # a journal file cut short or overwritten
        raise ConfigError(
            f"{where} is not a readable Optuna study ({one_line(error, limit=120)}); {fix}"
        ) from None


def load_study(sweep_dir: Path) -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    found = study_file(sweep_dir)
    require(found is not None, f"{sweep_dir} holds no Optuna study ({STUDY_FILE}, {JOURNAL_FILE})")
    path = found.resolve()
    with study_read(str(path), WITHOUT):
        storage = journal_storage(path) if path.name == JOURNAL_FILE else f"sqlite:///{path}"
        names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        require(bool(names), f"{path} is not a readable Optuna study (it holds none); {WITHOUT}")
        name = STUDY_NAME if STUDY_NAME in names else names[0]
        return optuna.load_study(study_name=name, storage=storage)


def journal_storage(path: Path) -> Any:
    """Optuna's journal file at `path` (made if it is not there). One whose last record is cut
    short (the file truncated or overwritten) is a ValueError: Optuna would take the records
    before it for the study and break at its next write."""
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(JOURNAL_CHECKS):
        if not path.is_file() or last_byte(path) in (b"", b"\n"):
            return JournalStorage(JournalFileBackend(str(path)))
        time.sleep(0.1)  # another process sharing the file may be writing a record now
    raise ValueError("its last record is cut short: the file was truncated or overwritten")


JOURNAL_CHECKS = 5  # looks at a journal's end, 0.1 s apart, before it is taken for cut short


def last_byte(path: Path) -> bytes:
    with path.open("rb") as file:
        file.seek(0, os.SEEK_END)
        if file.tell() == 0:
            return b""
        file.seek(-1, os.SEEK_END)
        return file.read(1)


def aims(study: Any) -> list[str]:
    """The study's objectives, as fedlight recorded them (`value` where it did not)."""
    named = study.user_attrs.get("objectives") or [study.user_attrs.get("objective", "value")]
    if len(named) != len(study.directions):  # a study fedlight did not begin
        return [f"value {i}" for i in range(len(study.directions))]
    return [str(n) for n in named]


def note(study: Any, trial: Any) -> str:
    """What happened to `trial`: fedlight's note on it (in a study begun before fedlight noted
    its trials, the study's note of it, or the trial's under its former name), else its state."""
    notes = study.user_attrs.get("notes") or {}
    former = notes.get(str(trial.number), trial.user_attrs.get("fedlight"))
    return str(trial.user_attrs.get(NOTE_ATTR, former or trial.state.name.lower()))


def importance(study: Any, completed: list[Any], index: int = 0) -> dict[str, float]:
    """Each searched parameter's importance for the objective `index` (a random forest's, fixed
    seed), summing to 1; empty with fewer than two completed trials or a single value of every
    parameter."""
    import optuna

    names = {n for t in completed for n in t.params}
    varied = {n for n in names if len({str(t.params.get(n)) for t in completed}) > 1}
    if len(completed) < 2 or not varied:
        return {}
    evaluator = optuna.importance.MeanDecreaseImpurityImportanceEvaluator(seed=0)
    if len({t.values[index] for t in completed}) < 2:  # the same value in every trial
        return {}
    target = None if len(study.directions) == 1 else (lambda t: t.values[index])
    return dict(optuna.importance.get_param_importances(study, evaluator=evaluator, target=target))


def study_markdown(
    study: Any, label: str, plot_name: str, file_name: str = STUDY_FILE
) -> list[str]:
    """The study's section of report.md (of the study in `label/file_name`); its plot is
    `plot_name` beside it."""
    from optuna.trial import TrialState

    completed = [t for t in study.trials if t.state == TrialState.COMPLETE]
    objectives = aims(study)
    lines = study_heading(study, label, file_name, objectives)
    if not completed:
        return [*lines, "No trial has completed yet.", ""]
    front = {t.number for t in study.best_trials} if len(objectives) > 1 else set()
    lines += best_lines(study, objectives, front, len(completed))
    for index, objective in enumerate(objectives):
        shares = importance(study, completed, index)
        if shares:
            lines += [
                f"Importance{f' for {objective}' if len(objectives) > 1 else ''} (mean decrease "
                "in impurity of a random forest): "
                + ", ".join(f"{n} {s:.2f}" for n, s in shares.items()),
                "",
            ]
    return [*lines, *trial_table(study, objectives, front), "", f"![trials]({plot_name})", ""]


def study_heading(study: Any, label: str, file_name: str, objectives: list[str]) -> list[str]:
    """The section's title (each objective and its direction) and its count of trials by what
    happened to them (pruned: stopped early by the study's pruner, `hydra/sweeper/pruner`)."""
    from optuna.trial import TrialState

    directions = [d.name.lower() for d in study.directions]
    counts = {s: sum(t.state == s for t in study.trials) for s in TrialState}
    pruned = counts[TrialState.PRUNED]
    aimed = "; ".join(
        f"{o}{',' if len(objectives) == 1 else ''} {d}d"
        for o, d in zip(objectives, directions, strict=True)
    )
    return [
        f"## Study {label}: {aimed}",
        "",
        f"{len(study.trials)} trials: {counts[TrialState.COMPLETE]} completed, "
        + (f"{pruned} pruned, " if pruned else "")
        + f"{counts[TrialState.FAIL]} failed, {counts[TrialState.RUNNING]} interrupted "
        f"(Optuna study `{study.study_name}` in `{label}/{file_name}`).",
        "",
    ]


def best_lines(study: Any, objectives: list[str], front: set[int], completed: int) -> list[str]:
    """The best trial and its parameters (one objective), or the Pareto front (several)."""
    if len(objectives) == 1:
        best = study.best_trial
        return [
            f"Best: **{best.value:.4f}** in trial {best.number} (job {best.number}): "
            + ", ".join(f"`{n}={v}`" for n, v in best.params.items()),
            "",
        ]
    return [
        f"Pareto front ({', '.join(objectives)}): {len(front)} of {completed} completed "
        f"trials, those no other trial beats in every objective: trial"
        f"{'s' if len(front) > 1 else ''} "
        + ", ".join(str(n) for n in sorted(front))
        + " (marked ◆ below).",
        "",
    ]


def trial_table(study: Any, objectives: list[str], front: set[int]) -> list[str]:
    """Every trial: its parameters, its values (a pruned trial's: its last round's), and what
    happened to it where that is more than its values; the front's trials marked ◆."""
    names = list(dict.fromkeys(n for t in study.trials for n in t.params))
    marked = ["front"] if front else []
    header = ["trial", *marked, *names, *objectives, "note"]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(["---:"] * len(header)) + " |"]
    for trial in study.trials:
        values = trial.values or [None] * len(objectives)
        shown = ["—" if v is None else f"{v:.4f}" for v in values]
        said = note(study, trial)
        plain = ", ".join(
            f"{o} {v:.4g}" for o, v in zip(objectives, values, strict=True) if v is not None
        )
        if said == plain or (len(objectives) == 1 and said.startswith(f"{objectives[0]} ")):
            said = ""  # a value as any other: nothing to say
        on_front = ["◆" if trial.number in front else ""] if front else []
        cells = [str(trial.number), *on_front, *(str(trial.params.get(n, "")) for n in names)]
        cells += [*shown, said]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return lines


def write_study_plot(study: Any, path: Path, label: str) -> None:
    """One objective: it against the trial (and the best so far), and against each parameter.
    Several: the first two against each other, the Pareto front drawn, and the first against
    each parameter."""
    from matplotlib.ticker import MaxNLocator
    from optuna.trial import TrialState

    completed = [t for t in study.trials if t.state == TrialState.COMPLETE]
    if not completed:
        return
    names = list(dict.fromkeys(n for t in completed for n in t.params))
    objectives = aims(study)
    fig = curves.figure(3.6 * (1 + len(names)), 3.4)
    axes = fig.subplots(1, 1 + len(names), squeeze=False)[0]
    values = [t.values[0] for t in completed]
    if len(objectives) == 1:
        numbers = [t.number for t in completed]
        pick = max if study.direction.name == "MAXIMIZE" else min
        best = [pick(values[: i + 1]) for i in range(len(values))]
        axes[0].scatter(numbers, values, s=14, label="trial")
        axes[0].step(numbers, best, where="post", color="black", linewidth=1, label="best so far")
        axes[0].set(xlabel="trial", ylabel=objectives[0], title=label)
        axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))
    else:
        front = sorted(study.best_trials, key=lambda t: t.values[1])
        axes[0].scatter([t.values[1] for t in completed], values, s=14, label="trial")
        axes[0].plot(
            [t.values[1] for t in front],
            [t.values[0] for t in front],
            "D-",
            color="black",
            linewidth=1,
            markersize=5,
            label="Pareto front",
        )
        for t in completed:
            axes[0].annotate(
                str(t.number),
                (t.values[1], t.values[0]),
                xytext=(4, 4),
                textcoords="offset points",
                fontsize=7,
            )
        axes[0].set(xlabel=objectives[1], ylabel=objectives[0], title=label)
    axes[0].legend(fontsize="small")
    for ax, name in zip(axes[1:], names, strict=True):
        pairs = [(t.params[name], t.values[0]) for t in completed if name in t.params]
        xs = [x for x, _ in pairs]
        numeric = all(isinstance(x, int | float) for x in xs)
        if numeric and min(xs) > 0 and max(xs) / min(xs) >= 10:
            ax.set_xscale("log")
        ax.scatter(xs if numeric else [str(x) for x in xs], [y for _, y in pairs], s=14)
        ax.set(xlabel=name, ylabel=objectives[0])
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    curves.save(fig, path, dpi=110)


def studies_markdown(sweep_dirs: list[Path], output_dir: Path) -> list[str]:
    """The sections of every study among `sweep_dirs`, each with its plot written beside
    report.md (study.png, or study_<dir>.png with several)."""
    studies = [d for d in sweep_dirs if has_study(d)]
    lines: list[str] = []
    for sweep_dir in studies:
        label = sweep_dir.resolve().name
        plot = "study.png" if len(studies) == 1 else f"study_{label}.png"
        study = load_study(sweep_dir)
        lines += study_markdown(study, label, plot, study_file(sweep_dir).name)  # type: ignore[union-attr]
        write_study_plot(study, output_dir / plot, label)
    return lines
