"""What `hydra/sweeper=optuna`'s settings mean: the sampler built from its YAML and the settings'
types checked (YAML types nothing), the study's objectives and their directions, and its storage
(an SQLite file in the sweep directory, Optuna's journal file, or a URL)."""

import difflib
import re
from pathlib import Path
from typing import Any

import optuna
from hydra.utils import instantiate

from fedlight.core.errors import ConfigError, one_line, require
from fedlight.core.objectives import OBJECTIVES
from fedlight.store.run_files import JOURNAL_FILE, STUDY_FILE

# The settings of the samplers' and pruners' YAMLs (fedlight/conf/hydra/sweeper/<kind>) that
# take text
TEXT_SETTINGS = {
    "sampler": {"_target_", "qmc_type"},
    "pruner": {"_target_", "min_resource", "max_resource"},  # a number of rounds, or "auto"
}


def built_sampler(config: dict[str, Any]) -> optuna.samplers.BaseSampler:
    """The sampler of `hydra/sweeper/sampler=<name>` with its settings; a setting its constructor
    refuses, or a grid (Hydra's basic sweeper's job), is one line."""
    if config.get("_target_") == "optuna.samplers.GridSampler":
        raise ConfigError(
            "hydra/sweeper=optuna with sampler=grid: a grid is Hydra's basic sweeper; drop "
            "hydra/sweeper=optuna and list the values (optim.lr=0.01,0.03,0.1)"
        )
    return built("sampler", config)


def built_pruner(config: dict[str, Any] | None) -> optuna.pruners.BasePruner:
    """The pruner of `hydra/sweeper/pruner=<name>` with its settings (none where a study's
    config has no pruner: one begun before fedlight pruned)."""
    return optuna.pruners.NopPruner() if config is None else built("pruner", config)


def built(kind: str, config: dict[str, Any]) -> Any:
    """`hydra.sweeper.<kind>` built from its YAML, its settings' types checked (YAML types
    nothing); a setting its constructor refuses is one line."""
    for key, value in config.items():
        require(
            not isinstance(value, str) or key in TEXT_SETTINGS[kind],
            f"hydra.sweeper.{kind}.{key}={value!r} must be a number, a boolean or null",
        )
    try:
        return instantiate(config)
    except Exception as error:  # noqa: BLE001 - the constructor's own refusal, whatever its type
        raise ConfigError(f"hydra.sweeper.{kind}: {one_line(error)}") from None


def typed(settings: dict[str, Any], key: str, kind: type) -> Any:
    """`hydra.sweeper.<key>` of its type (YAML types nothing; an int is a float too)."""
    value = settings[key]
    kinds = (int, float) if kind is float else (kind,)
    require(
        isinstance(value, kinds) and not isinstance(value, bool),
        f"hydra.sweeper.{key}={value!r} must be {'an integer' if kind is int else 'a number'}",
    )
    return value


def objectives(given: Any, objective: str) -> list[str]:
    """The study's objectives: `hydra.sweeper.objectives` where given, else the run's one."""
    if given is None:
        return [objective]
    named = [str(o) for o in (given if isinstance(given, list) else [given])]
    unknown = [o for o in named if o not in OBJECTIVES]
    require(
        not unknown,
        f"hydra.sweeper.objectives: {', '.join(unknown)} is not a summary.json number; choose "
        f"from: {', '.join(OBJECTIVES)}",
    )
    require(bool(named), "hydra.sweeper.objectives is empty; name one or more, or none (null)")
    require(len(set(named)) == len(named), f"hydra.sweeper.objectives={named} names one twice")
    return named


def directions(given: Any, aims: list[str]) -> list[str]:
    """One direction per objective: `direction` where given (one, or one per objective), else
    each objective's own."""
    if given is None:
        unknown = [o for o in aims if o not in OBJECTIVES]
        near = difflib.get_close_matches(unknown[0], OBJECTIVES, n=1) if unknown else []
        require(
            not unknown,
            f"objective={', '.join(unknown)} is not a summary.json number"
            + (f" (did you mean {near[0]}?)" if near else "")
            + "; a column the run logs is studied with its way given: "
            "hydra.sweeper.direction=minimize (or maximize)",
        )
        return [OBJECTIVES[o].direction for o in aims]
    named = [str(getattr(d, "name", d)) for d in (given if isinstance(given, list) else [given])]
    wrong = [d for d in named if d not in ("maximize", "minimize")]
    require(not wrong, f"hydra.sweeper.direction: {', '.join(wrong)} is not maximize or minimize")
    if len(named) != len(aims):
        raise ConfigError(
            f"hydra.sweeper.direction={named}: the study has {len(aims)} objective"
            f"{'s' if len(aims) > 1 else ''} ({', '.join(aims)}); give one direction each "
            "(maximize or minimize) or none (each objective's)"
        )
    return named


def study_storage(given: Any, sweep_dir: Path) -> tuple[Any, str]:
    """The study's storage, as Optuna takes it (a journal file: its path), and where it is (for
    messages): `None`, SQLite in the sweep directory; a URL; `journal` or a `*.log` path, Optuna's
    journal file; an Optuna storage Hydra instantiated (`_target_`)."""
    if isinstance(given, optuna.storages.BaseStorage):
        return given, type(given).__name__
    if given is None:
        path = sweep_dir.resolve() / STUDY_FILE
        return f"sqlite:///{path}", str(path)
    text = str(given)
    if "://" in text:  # its password, if it names one, not printed
        return text, re.sub(r"://([^:/@]+):[^@/]*@", r"://\1:***@", text)
    if text == "journal" or text.endswith(".log"):
        path = sweep_dir.resolve() / JOURNAL_FILE if text == "journal" else Path(text).resolve()
        return path, str(path)  # made once the sweep directory is (journal_storage)
    raise ConfigError(
        f"hydra.sweeper.storage={text}: give an Optuna storage URL (sqlite:///..., "
        f"postgresql://...), journal (Optuna's journal file {sweep_dir}/{JOURNAL_FILE}) or a "
        "journal file's path (*.log)"
    )
