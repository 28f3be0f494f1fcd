"""What a resume compares: a run's config against the one its checkpoint was written with, the
settings a resume may change (`RESUME_FREE_KEYS`) aside, paths by the place they name, modules by
their current paths, and a setting added since at the value that keeps what runs did before.
"""

import json
import os
from collections.abc import Collection
from dataclasses import fields, is_dataclass
from typing import Any

import hydra

from fedlight.core.moved import current_path
from fedlight.core.settings import OUTPUT_ONLY, RunSettings

# Settings that may differ between a run and its resumption without changing any number (dotted
# for nested keys): a run may continue on another number of workers, checkpoint at another pace,
# and run for more rounds than it was started with (`fl.rounds` is checked on its own). Another
# `fl.threads_per_worker` or `fl.memory_format` changes float rounding only; summary.json's
# environment records it.
RESUME_FREE_KEYS = (
    *(key for key in OUTPUT_ONLY if key != "hydra"),  # where and how it is written or shown
    "objective",
    "fl.workers",
    "fl.threads_per_worker",
    "fl.memory_format",
    "fl.backend",
    "fl.worker_timeout",
    "fl.mmap_threshold_mb",  # where freed memory goes, not what is computed
    "fl.rounds",
    "checkpoint.every",
    "preemption",  # how a run is told to stop, not what it computes
    "data.cache_dir",  # where decoded images are kept, not what they are
    "privacy.target_epsilon",  # the budget: the noise a run calibrated is in its checkpoint
    "privacy.accountant",  # how ε is bounded (the noise is the checkpoint's): any, on resume
)
# Paths compared as the place they name: `data.root=../data/` is `data.root=../data`.
PATH_KEYS = ("data.root", "partition.path")


class Absent:
    """The value of a key one of two configs does not have (a setting added to fedlight after the
    other was written); unlike None, which a config can hold."""

    def __repr__(self) -> str:
        return "absent"


ABSENT = Absent()


def differences(saved: Any, current: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted key, saved value, current value) of every value that differs between two nested
    config dicts, in key order; ABSENT stands for a key one of them lacks."""
    if isinstance(saved, dict) and isinstance(current, dict):
        return [
            found
            for key in sorted(set(saved) | set(current))
            for found in differences(
                saved.get(key, ABSENT), current.get(key, ABSENT), f"{path}{key}."
            )
        ]
    return [] if saved == current else [(path.rstrip("."), saved, current)]


def settings_default(dotted: str) -> Any:
    """RunSettings' default for a dotted key (`fl.client_state_memory_mb`), ABSENT for a key that
    is not a RunSettings field (the groups' options: `algo.*`, `data.*`, ...)."""
    value: Any = RunSettings()
    for name in dotted.split("."):
        if not is_dataclass(value) or name not in {f.name for f in fields(value)}:
            return ABSENT
        value = getattr(value, name)
    return value


def value_before(dotted: str, config: dict[str, Any]) -> Any:
    """The value of a setting that keeps what runs did before it existed: RunSettings' default
    (a new setting's default keeps the old behaviour), for a group option's setting what the
    option's class declares in `settings_before` (where the new default changed what the option
    does: `compression.bucket_size`, 0 for QSGD's one bucket per tensor), and for a whole group
    added since, its node where the option's class says runs before the group ran as it does
    (`as_before_the_group`: `local_work=fixed`); ABSENT otherwise."""
    if (default := settings_default(dotted)) is not ABSENT:
        return default
    *path, name = dotted.split(".")
    node: Any = config
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    group = node.get(name) if isinstance(node, dict) else None
    if isinstance(group, dict) and isinstance(group.get("_target_"), str):
        if getattr(hydra.utils.get_object(group["_target_"]), "as_before_the_group", False):
            return group
    if not isinstance(node, dict) or not isinstance(node.get("_target_"), str):
        return ABSENT
    option = hydra.utils.get_object(node["_target_"])
    return getattr(option, "settings_before", {}).get(name, ABSENT)


def first_difference(saved: Any, current: Any, derived: Collection[str] = ()) -> str | None:
    """The first differing key the user can have written between a saved config and the current
    one (`comparable_config`): keys `derived` by interpolation from another (e.g. `model.lr:
    ${optim.lr}`) are named only when nothing else differs. The saved config is compared as the
    current one is (a run recorded before its modules moved, or before a setting became one a
    resume may change, is the same run); a setting added to fedlight after the checkpoint was
    written (absent from its config) is no difference at the value that keeps what runs did
    before it existed (`value_before`)."""
    if isinstance(saved, dict):
        saved = comparable_config(saved)
    found = [
        (key, was, now)
        for key, was, now in differences(saved, current)
        if not (was is ABSENT and now == value_before(key, current))
    ]
    if not found:
        return None
    key, was, now = next((d for d in found if d[0] not in derived), found[0])
    if was is ABSENT and (before := value_before(key, current)) is not ABSENT:
        return (
            f"{key} (checkpoint absent, now {now!r}); the checkpoint predates the setting: "
            f"{key}={json.dumps(before)} continues it as it ran"
        )
    return f"{key} (checkpoint {was!r}, now {now!r})"


def comparable_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The config without the RESUME_FREE_KEYS, its PATH_KEYS normalized, its `_target_`s named
    by their modules' current paths."""
    comparable: dict[str, Any] = {}
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if dotted in RESUME_FREE_KEYS:
            continue
        if isinstance(value, dict):
            value = comparable_config(value, f"{dotted}.")
        elif dotted in PATH_KEYS and isinstance(value, str):
            value = os.path.normpath(value)
        elif key == "_target_" and isinstance(value, str):
            value = current_path(value)  # a run recorded before its module moved
        comparable[key] = value
    return comparable
