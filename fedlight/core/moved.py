"""Modules that moved when fedlight's folders took the shape of its layers (docs/architecture.md).

A config's `_target_` that names an old path is refused in one line naming the new one
(`fedlight.cli.job`); a resumed run recorded with old paths compares equal to its new config
(`fedlight.runs.same_config.comparable_config`). Nothing is importable under an old path.
"""

from typing import Any

from fedlight.core.errors import ConfigError

# old module path -> new one (a package's modules move with it)
MOVED: dict[str, str] = {
    "fedlight.selection": "fedlight.stages.selection",
    "fedlight.attacks": "fedlight.stages.attacks",
    "fedlight.privacy": "fedlight.stages.privacy",
    "fedlight.secure_aggregation": "fedlight.stages.secure_aggregation",
    "fedlight.wire": "fedlight.stages.wire",
    "fedlight.compression": "fedlight.stages.compression",
    "fedlight.pipeline.stage": "fedlight.stages.base",
    "fedlight.pipeline": "fedlight.round",
}


def current_path(target: str) -> str:
    """`target` (`module.Class`) with an old module path replaced by its new one."""
    for old in sorted(MOVED, key=len, reverse=True):
        if target == old or target.startswith(old + "."):
            return MOVED[old] + target[len(old) :]
    return target


def check_targets(config: Any, path: str = "") -> None:
    """Refuse, in one line, the first `_target_` of `config` (a plain container) that names a
    module's old path."""
    if isinstance(config, dict):
        for key, value in config.items():
            where = f"{path}{key}"
            if key == "_target_" and isinstance(value, str) and current_path(value) != value:
                raise ConfigError(
                    f"{where}={value}: fedlight's modules moved into the folders of its layers; "
                    f"write {current_path(value)}"
                )
            check_targets(value, f"{where}.")
    elif isinstance(config, list):
        for position, value in enumerate(config):
            check_targets(value, f"{path}{position}.")
