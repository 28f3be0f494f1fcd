"""A study's search space from Hydra's sweep overrides, in the syntax of Hydra's Optuna sweeper
(`choice()`, `interval()` with `tag(log, ...)`, `range()`) as Optuna distributions, the settings
kept fixed, the record a study keeps of both (and optuna 2's form of it) and a trial's overrides."""

import re
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, Transformer
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from fedlight.core.errors import require
from fedlight.runs.same_config import RESUME_FREE_KEYS


def search_space(
    overrides: list[str], parser: OverridesParser | None = None
) -> tuple[dict[str, BaseDistribution], dict[str, Any]]:
    """Each sweep override as an Optuna distribution, the others as fixed settings; a parameter
    both searched and fixed is fixed (the command's value over the preset's search). `parser`:
    one with Hydra's config loader, which lists a group's options for `glob()`."""
    space: dict[str, BaseDistribution] = {}
    fixed: dict[str, Any] = {}
    for override in (parser or OverridesParser.create()).parse_overrides(overrides):
        name = override.get_key_element()
        if override.is_sweep_override():
            space[name] = distribution(override)
            fixed.pop(name, None)
        else:
            fixed[name] = override.get_value_element_as_str()
            space.pop(name, None)
    return space, fixed


def distribution(override: Override) -> BaseDistribution:
    """A sweep override as Optuna searches it: `interval(a,b)`, see `interval_distribution`;
    `range(a,b,step)`, the values Hydra lists for it (ints where they are; `b` excluded;
    shuffled: categorical); `choice(...)` and `glob(...)` (a group's options), categorical."""
    value = override.value()
    listed = lambda: list(override.sweep_iterator(transformer=Transformer.encode))  # noqa: E731
    if override.is_interval_sweep():
        return interval_distribution(override)
    if not override.is_range_sweep():  # choice(), glob()
        return CategoricalDistribution(listed())
    values = listed()
    require(bool(values), f"{override.input_line} lists no value")
    if value.shuffle:
        return CategoricalDistribution(values)
    step = value.step
    if all(isinstance(v, int) for v in values) and isinstance(step, int):
        return IntDistribution(values[0], values[-1], step=step)
    low = float(values[0])
    return FloatDistribution(low, low + float(step) * (len(values) - 1), step=float(step))


# The tags of an interval() that hydra/sweeper=optuna reads, as Hydra's Optuna sweeper does
INTERVAL_TAGS = {"log": "a log scale", "int": "whole numbers"}


def interval_distribution(override: Override) -> BaseDistribution:
    """`interval(a,b)`: a float uniform over [a, b] (Hydra reads its ends as floats,
    interval(1,5) too); `tag(log, ...)` log-uniform, `tag(int, ...)` the whole numbers from a to
    b, as Hydra's Optuna sweeper draws them. A tag it does not know, or ends out of order, is
    one line."""
    value = override.value()
    line, tags = override.input_line, set(value.tags)
    known = ", ".join(f"{tag} ({what})" for tag, what in INTERVAL_TAGS.items())
    unknown = ", ".join(sorted(tags - set(INTERVAL_TAGS)))
    require(not unknown, f"{line}: hydra/sweeper=optuna reads the tags {known}, not {unknown}")
    low, high, log = float(value.start), float(value.end), "log" in tags
    require(low <= high, f"{line}: its low end is above its high end; give them low first")
    require(not log or low > 0, f"{line}: a log scale needs a low end above 0")
    if "int" in tags:
        require(low.is_integer() and high.is_integer(), f"{line}: tag int needs whole ends")
        return IntDistribution(int(low), int(high), log=log)
    return FloatDistribution(low, high, log=log)


def search_record(space: dict[str, BaseDistribution], fixed: dict[str, Any]) -> list[str]:
    """The search as the study keeps it: each distribution, and each fixed setting that changes
    a number (those a resume may change left out)."""
    searched = [f"{name}={distribution}" for name, distribution in space.items()]
    kept = [
        f"{name}={value}"
        for name, value in fixed.items()
        if name.lstrip("+~") not in RESUME_FREE_KEYS and not name.startswith("hydra")
    ]
    return sorted(searched) + sorted(kept)


def legacy_record(searched: list[str]) -> list[str]:
    """`searched` as a study begun under optuna 2 recorded it (its distribution classes), so
    that such a study, its storage upgraded (`optuna storage upgrade`), continues."""
    return [f"{n}={legacy_distribution(t)}" for n, _, t in (s.partition("=") for s in searched)]


def legacy_distribution(text: str) -> str:
    """`FloatDistribution(high=0.3, log=True, low=0.01, step=None)` as optuna 2 wrote it
    (`LogUniformDistribution(high=0.3, low=0.01)`); another text as it is."""
    match = re.fullmatch(r"(Float|Int)Distribution\((high=.*)\)", text)
    if match is None:
        return text
    args = dict(pair.split("=", 1) for pair in match.group(2).split(", "))
    high, low, step, log = args["high"], args["low"], args["step"], args["log"] == "True"
    if match.group(1) == "Float":
        if log:
            return f"LogUniformDistribution(high={high}, low={low})"
        if step != "None":
            return f"DiscreteUniformDistribution(high={high}, low={low}, q={step})"
        return f"UniformDistribution(high={high}, low={low})"
    kind = "IntLogUniformDistribution" if log else "IntUniformDistribution"
    return f"{kind}(high={high}, low={low}, step={step})"


def trial_overrides(params: dict[str, Any], fixed: dict[str, Any]) -> list[str]:
    """The overrides a trial runs with: its drawn parameters, and this command's fixed ones (the
    study's, up to those a resume may change, such as `resume=auto`)."""
    return [f"{name}={value}" for name, value in {**params, **fixed}.items()]
