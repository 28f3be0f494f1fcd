"""An Optuna sampler's state as JSON numbers (`<sweep dir>/optuna_sampler.json`): each numpy
random generator in it by its attribute path, so that a continued study draws what the
uninterrupted one would have, and a file planted in the sweep directory is read as numbers into a
sampler built from the configuration: no pickle, no code run (`fedlight.runs.optuna_sweeper`).
"""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from fedlight.core.errors import require
from fedlight.store.files import write_text


def random_states(sampler: Any) -> Iterator[tuple[str, Any]]:
    """Each numpy random generator (RandomState, Generator) in `sampler` (its random sampler's
    too), by its attribute path: all of a sampler's state that its storage does not hold (TPE,
    random, NSGA-II, GP, QMC, and CMA-ES, whose search state Optuna keeps in the storage)."""
    seen: set[int] = set()

    def walk(obj: Any, path: str) -> Iterator[tuple[str, Any]]:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, np.random.RandomState | np.random.Generator):
            yield path, obj
        elif type(obj).__name__ == "LazyRandomState":  # made on first use: made now
            yield from walk(obj.rng, f"{path}.rng")
        elif isinstance(obj, dict):
            for key, item in obj.items():
                yield from walk(item, f"{path}[{key!r}]")
        elif isinstance(obj, list | tuple):
            for index, item in enumerate(obj):
                yield from walk(item, f"{path}[{index}]")
        elif type(obj).__module__.startswith("optuna") and hasattr(obj, "__dict__"):
            for key, item in vars(obj).items():
                yield from walk(item, f"{path}.{key}")

    yield from walk(sampler, "")


def as_json(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return {"array": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        return value.item()
    return value


def from_json(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"array", "dtype"}:
        return np.asarray(value["array"], dtype=np.dtype(value["dtype"]))
    if isinstance(value, dict):
        return {k: from_json(v) for k, v in value.items()}
    return value


def sampler_state(sampler: Any) -> dict[str, Any]:
    states = {}
    for path, rng in random_states(sampler):
        state = (
            rng.get_state(legacy=False)
            if isinstance(rng, np.random.RandomState)
            else rng.bit_generator.state
        )
        states[path] = as_json(state)
    return {"sampler": type(sampler).__qualname__, "random_states": states}


def keep_sampler(sampler: optuna.samplers.BaseSampler, path: Path) -> None:
    """The sampler's random states after a draw, as JSON numbers, written atomically and never
    through a link (fedlight's writer: the sweep directory may be writable by others)."""
    write_text(path, json.dumps(sampler_state(sampler)))


def restore_sampler(sampler: Any, kept: Any) -> None:
    """`sampler` (built from the configuration) given the random states `kept`; an error where
    `kept` is not the state of a sampler of its kind."""
    require(isinstance(kept, dict), "not a JSON object")
    require(
        kept.get("sampler") == type(sampler).__qualname__,
        f"it was a {kept.get('sampler')}",
    )
    states = kept.get("random_states")
    generators = dict(random_states(sampler))
    require(
        isinstance(states, dict) and set(states) == set(generators),
        "its random generators are not this sampler's",
    )
    for path, rng in generators.items():
        state = from_json(states[path])
        require(isinstance(state, dict), f"{path or 'its generator'} is not a generator's state")
        STATE_CHECKS.get(str(state.get("bit_generator")), lambda state: None)(state)
        if isinstance(rng, np.random.RandomState):
            rng.set_state(state)
        else:
            rng.bit_generator.state = state


def check_mt19937(state: dict[str, Any]) -> None:
    """An MT19937 state (numpy's RandomState, what Optuna's samplers draw with) as numpy keeps
    it: 624 unsigned 32-bit words, not all zero (a degenerate state, from which every draw
    repeats), and a position among them. numpy itself takes floats and zeros without a word."""
    inner = state.get("state")
    key = inner.get("key") if isinstance(inner, dict) else None
    pos = inner.get("pos") if isinstance(inner, dict) else None
    require(
        isinstance(key, np.ndarray) and key.dtype == np.uint32 and key.shape == (624,),
        "its MT19937 key is not 624 unsigned 32-bit integers",
    )
    require(bool(key.any()), "its MT19937 key is all zeros (every draw from it repeats)")
    require(
        isinstance(pos, int) and not isinstance(pos, bool) and 0 <= pos <= 624,
        f"its MT19937 position {pos!r} is not from 0 to 624",
    )


# The checks of a bit generator's kept state, by its name (those numpy itself checks: none)
STATE_CHECKS = {"MT19937": check_mt19937}
