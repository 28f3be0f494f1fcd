"""`fedlight report` of a study (`hydra/sweeper=optuna`, fedlight/runs/optuna_sweeper.py): per
study, the best parameters and the value they reached, every trial (its parameters, value, and what
happened to it), the importance of each parameter (Optuna's mean decrease in impurity of a random
forest fitted to the trials: Breiman 2001; its fANOVA fails under this numpy), and the trial
history as a plot (the objective against the trial, with the best so far, and against each
parameter). optuna is imported only when a report has a study to read.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fedlight.core.errors import ConfigError, require
from fedlight.reports import curves
from fedlight.store.run_files import STUDY_FILE, STUDY_NAME

# What to do with a study file Optuna cannot read, in a sweep and in a report.
AFRESH = "move it away to begin the study afresh (its trials' directories stay)"
WITHOUT = "move it away to report the sweep without its study"


def has_study(sweep_dir: Path) -> bool:
    return (sweep_dir / STUDY_FILE).is_file()


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


def load_study(sweep_dir: Path) -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    path = (sweep_dir / STUDY_FILE).resolve()
    storage = f"sqlite:///{path}"
    with study_read(str(path), WITHOUT):
        names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        require(bool(names), f"{path} is not a readable Optuna study (it holds none); {WITHOUT}")
        name = STUDY_NAME if STUDY_NAME in names else names[0]
        return optuna.load_study(study_name=name, storage=storage)


def importance(study: Any, completed: list[Any]) -> dict[str, float]:
    """Each searched parameter's importance (a random forest's, fixed seed), summing to 1; empty
    with fewer than two completed trials or a single value of every parameter."""
    import optuna

    params = study.best_trial.params
    varied = {n for n in params if len({str(t.params.get(n)) for t in completed}) > 1}
    if len(completed) < 2 or not varied:
        return {}
    evaluator = optuna.importance.MeanDecreaseImpurityImportanceEvaluator(seed=0)
    return dict(optuna.importance.get_param_importances(study, evaluator=evaluator))


def study_markdown(study: Any, label: str, plot_name: str) -> list[str]:
    """The study's section of report.md; its plot is `plot_name` beside it."""
    from optuna.trial import TrialState

    trials = study.trials
    completed = [t for t in trials if t.state == TrialState.COMPLETE]
    objective = study.user_attrs.get("objective", "value")
    direction = study.direction.name.lower()
    counts = {s: sum(t.state == s for t in trials) for s in TrialState}
    lines = [
        f"## Study {label}: {objective}, {direction}d",
        "",
        f"{len(trials)} trials: {counts[TrialState.COMPLETE]} completed, "
        f"{counts[TrialState.FAIL]} failed, {counts[TrialState.RUNNING]} interrupted "
        f"(Optuna study `{study.study_name}` in `{label}/{STUDY_FILE}`).",
        "",
    ]
    if not completed:
        return [*lines, "No trial has completed yet.", ""]
    best = study.best_trial
    shares = importance(study, completed)
    names = list(best.params)
    lines += [
        f"Best: **{best.value:.4f}** in trial {best.number} (job {best.number}): "
        + ", ".join(f"`{n}={v}`" for n, v in best.params.items()),
        "",
    ]
    if shares:
        lines += [
            "Importance (mean decrease in impurity of a random forest): "
            + ", ".join(f"{n} {s:.2f}" for n, s in shares.items()),
            "",
        ]
    header = ["trial", *names, objective, "note"]
    lines += ["| " + " | ".join(header) + " |", "| " + " | ".join(["---:"] * len(header)) + " |"]
    for trial in trials:
        value = "—" if trial.value is None else f"{trial.value:.4f}"
        note = trial.user_attrs.get("fedlight", trial.state.name.lower())
        if note.startswith(f"{objective} "):  # a value as any other: nothing to say
            note = ""
        cells = [str(trial.number), *(str(trial.params.get(n, "")) for n in names), value, note]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return [*lines, "", f"![trials]({plot_name})", ""]


def write_study_plot(study: Any, path: Path, label: str) -> None:
    """The objective against the trial (and the best so far), and against each parameter."""
    from matplotlib.ticker import MaxNLocator
    from optuna.trial import TrialState

    completed = [t for t in study.trials if t.state == TrialState.COMPLETE]
    if not completed:
        return
    names = list(study.best_trial.params)
    objective = study.user_attrs.get("objective", "value")
    fig = curves.figure(3.6 * (1 + len(names)), 3.4)
    axes = fig.subplots(1, 1 + len(names), squeeze=False)[0]
    numbers = [t.number for t in completed]
    values = [t.value for t in completed]
    pick = max if study.direction.name == "MAXIMIZE" else min
    best = [pick(values[: i + 1]) for i in range(len(values))]
    axes[0].scatter(numbers, values, s=14, label="trial")
    axes[0].step(numbers, best, where="post", color="black", linewidth=1, label="best so far")
    axes[0].set(xlabel="trial", ylabel=objective, title=label)
    axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].legend(fontsize="small")
    for ax, name in zip(axes[1:], names, strict=True):
        xs = [t.params.get(name) for t in completed]
        numeric = all(isinstance(x, int | float) for x in xs)
        if numeric and min(xs) > 0 and max(xs) / min(xs) >= 10:
            ax.set_xscale("log")
        ax.scatter(xs if numeric else [str(x) for x in xs], values, s=14)
        ax.set(xlabel=name, ylabel=objective)
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
        lines += study_markdown(study, label, plot)
        write_study_plot(study, output_dir / plot, label)
    return lines
