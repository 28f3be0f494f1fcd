"""Stage kinds other packages plug into fedlight: entry points of group `fedlight.stage_kinds`,
each `<kind> = "<module>:<class>"` (fedlight.cli.schema makes each a config group). Light: the
Hydra plugin that puts their YAMLs on the search path imports it in any Hydra program.
"""

from importlib.metadata import entry_points

ENTRY_POINTS = "fedlight.stage_kinds"


def plugged_kinds() -> dict[str, str]:
    """Each plugged-in stage kind and its default stage class, `module:Class`."""
    return {entry.name: entry.value for entry in entry_points(group=ENTRY_POINTS)}
