"""Nothing read from a run, sweep or study directory names code to run.

Such a directory may be written by others (a shared disk, a copy from a colleague, records
downloaded with a paper), so the overrides `resume=<dir>`, `fedlight resume` and `fedlight tuned`
read from it (`.hydra/overrides.yaml`, `multirun.yaml`, `optimization_results.yaml`) are the
directory's word, not the user's. An override of them that would make Hydra or fedlight import or
call something is refused in one line naming the file and the override, unless the user's own
command gives the same override: then it is the user's word. What names code:

- a key of Hydra's instantiation (`_target_`, `_partial_`, `_args_`, ...) anywhere in the key or
  the value, nested in dicts and lists too, or a resolver that makes a config node from text
  (`oc.decode`, `oc.create`), which could spell such a key;
- a setting whose value fedlight imports by its dotted path (`core.dotted.CODE_SETTINGS`);
- Hydra's own settings that run code, shell commands or set a process's environment
  (`HYDRA_CODE_KEYS`), and a recorded `--config-dir`, whose configs name code.
"""

import itertools
import re
import shlex
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, Override
from hydra.errors import HydraException

from fedlight.core.dotted import CODE_SETTINGS
from fedlight.core.errors import ConfigError, one_line

# A key of the form Hydra gives its instantiation keys (`_target_`, `_partial_`, `_args_`, ...).
RESERVED_KEY = re.compile(r"^_[a-z]+_$")
# The same names anywhere in an override's text (a quoted value Hydra reads as a string, say).
RESERVED_TEXT = re.compile(r"(?<![A-Za-z0-9])_(target|partial|args|recursive|convert|call)_")
# Resolvers that make a config node from a string, which may spell any of the keys above.
NODE_RESOLVERS = re.compile(r"\boc\.(decode|create)\b")
# Hydra's settings that name callables (callbacks, logging's `()` factories), where configs are
# searched for, shell commands a launcher runs, or the environment of the job's processes.
HYDRA_CODE_KEYS = (
    "hydra.callbacks",
    "hydra.searchpath",
    "hydra.job_logging",
    "hydra.hydra_logging",
    "hydra.job.env_set",
    "hydra.job.env_copy",
    "hydra.launcher.setup",
    "hydra.launcher.srun_args",
    "hydra.launcher.additional_parameters",
    "hydra.launcher.ray",
)
CONFIG_DIR_FLAG = "--config-dir"


def names_code(key: str, value: Any) -> str | None:
    """The dotted key under which `key=value` (a parsed override's key and value) names code;
    None where it names none."""
    parts = key.split(".")
    if any(RESERVED_KEY.match(part) for part in parts) or key in CODE_SETTINGS:
        return key
    if key.startswith(HYDRA_CODE_KEYS):
        return key
    if isinstance(value, ChoiceSweep):
        return next(filter(None, (names_code(key, v) for v in value.list)), None)
    if isinstance(value, dict):
        return next(filter(None, (names_code(f"{key}.{k}", v) for k, v in value.items())), None)
    if isinstance(value, list | tuple):
        return next(filter(None, (names_code(key, v) for v in value)), None)
    return None


def code_named(override: Override) -> str | None:
    """Where `override` names code (a dotted key, or what in its text does); None: nowhere."""
    if override.is_delete():
        return None
    key = override.key_or_group.replace("/", ".")
    if found := names_code(key, override.value()):
        return found
    line = override.input_line or ""
    text = NODE_RESOLVERS.search(line) or RESERVED_TEXT.search(line)
    return text[0] if text else None


def parsed(line: Any, record: Path, command: str) -> Override:
    """One recorded override, parsed; anything else refused in one line naming `record`."""
    try:
        if not isinstance(line, str):
            raise HydraException(f"{line!r} is not an override")
        return OverridesParser.create().parse_override(line)
    except HydraException as error:  # its parse errors, the grammar's lexer's too
        raise ConfigError(
            f"{command}: {record} holds {str(line)[:80]!r}, which is not an override Hydra can "
            f"read ({one_line(error, limit=80)}); restore the file, or type the command yourself"
        ) from None


def refusal(command: str, record: Path, what: str, found: str, argument: str) -> ConfigError:
    """The one line that refuses code named by `record` (`what` it records, where: `found`)."""
    shown = what if len(what) <= 120 else what[:117] + "..."
    return ConfigError(
        f"{command}: {record} records {shown!r}, which names code to run ({found}); nothing "
        "read from a directory others may write runs code: if you trust it, give it on the "
        f"command line yourself: {command} {shlex.quote(argument)}"
    )


def vetted(
    recorded: Iterable[Any], record: Path, given: Collection[str], command: str
) -> list[str]:
    """`recorded` (overrides read from the file `record`) where none names code to run but those
    the user's own arguments `given` hold too; the first that does is refused in one line naming
    `record`, the override and how to give it oneself (`command`: the command's start)."""
    kept = []
    for line in recorded:
        found = code_named(parsed(line, record, command))
        if found is not None and line not in given:
            raise refusal(command, record, line, found, line)
        kept.append(line)
    return kept


def vetted_flags(flags: list[str], record: Path, given: Collection[str], command: str) -> list[str]:
    """The recorded flags of a command (`-m`, `--config-name`, `--config-dir`): a config
    directory, whose configs name code, is the directory's word unless `given` names it too."""
    for flag, value in itertools.pairwise(flags):
        if flag == CONFIG_DIR_FLAG and value not in config_dirs(list(given)):
            found = "the configs there may name any _target_"
            raise refusal(command, record, f"{flag} {value}", found, f"{flag}={value}")
    return flags


def config_dirs(arguments: list[str]) -> set[str]:
    """The config directories `arguments` name (`--config-dir=D`, `--config-dir D`, `-cd D`)."""
    named = {a.split("=", 1)[1] for a in arguments if a.startswith(f"{CONFIG_DIR_FLAG}=")}
    pairs = itertools.pairwise(arguments)
    return named | {value for flag, value in pairs if flag in (CONFIG_DIR_FLAG, "-cd")}
