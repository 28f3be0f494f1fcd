"""Stage kinds other packages plug into fedlight: entry points of group `fedlight.stage_kinds`
(`<kind> = "<module>:<class>"`; fedlight.cli.schema makes each a config group). A kind's YAMLs lie
in `conf/<kind>/` beside its module, and this plugin puts that `conf/` on Hydra's search path, so
that `+<kind>=<option>` finds them without `--config-dir`.

Hydra imports every module of the `hydra_plugins` namespace at start-up, in any Hydra program, so
this one stays light: it reads the entry points (`fedlight.core.stage_kinds`, which imports nothing
else of fedlight) and finds where their modules lie, importing none of those modules (only their
parent packages, as `find_spec` does).
"""

from importlib.util import find_spec
from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

from fedlight.core.stage_kinds import plugged_kinds


def conf_dir(kind: str, target: str) -> Path | None:
    """The `conf/` beside the kind's module if it holds the kind's folder; None where there is
    none or the module cannot be found (fedlight says so when it builds the stage)."""
    try:
        spec = find_spec(target.partition(":")[0])
    except Exception:  # noqa: BLE001  a parent package that fails to import must not stop Hydra
        return None
    if spec is None or spec.origin is None:
        return None
    conf = Path(spec.origin).parent / "conf"
    return conf if (conf / kind).is_dir() else None


class StageKindsSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        for kind, target in sorted(plugged_kinds().items()):
            if (conf := conf_dir(kind, target)) is not None:
                search_path.append(provider=f"fedlight-stage-kind-{kind}", path=f"file://{conf}")
