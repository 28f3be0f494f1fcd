"""What Hydra knows of fedlight: the registry of config groups (fedlight's own and the stage kinds
other packages plug in), the schema of `conf/config.yaml` over the typed settings
(`fedlight.core.settings`), the checks of a composed config as a whole, and the configs of
fedlight's Hydra plugins. Registered when the command starts (`register_configs`), not when a
module is imported.
"""

import keyword
import math
from dataclasses import dataclass, field, fields, make_dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore

from fedlight.core.errors import ConfigError, require
from fedlight.core.settings import DataSettings, FLSettings, RunSettings
from fedlight.core.stage_kinds import ENTRY_POINTS as STAGE_KINDS_ENTRY_POINTS
from fedlight.core.stage_kinds import plugged_kinds

CONF_DIR = str(Path(__file__).resolve().parent.parent / "conf")  # fedlight's config folder

# The largest float32: torch trains in it, so a larger setting overflows where it is used
# (optim.lr=1e300 in the optimizer's step, fl.client_state_memory_mb=1e308 once in bytes);
# written out, so that `--help` and tab completion, which read the schema, import no torch.
FLOAT32_MAX = (2 - 2**-23) * 2.0**127


def require_finite(config: Any, path: str = "") -> None:
    """Refuse inf and nan anywhere in a composed config, and numbers beyond float32's range: no
    setting of fedlight means them, and a learning rate or a Dirichlet alpha of inf silently
    turns every number of a run into nan."""
    if isinstance(config, dict):
        for key, value in config.items():
            require_finite(value, f"{path}{key}.")
    elif isinstance(config, list):
        for position, value in enumerate(config):
            require_finite(value, f"{path}{position}.")
    elif isinstance(config, float) and not math.isfinite(config):
        key = path.rstrip(".")
        raise ConfigError(f"{key}={config} is not a finite number; give {key} a finite value")
    elif isinstance(config, float) and abs(config) > FLOAT32_MAX:
        key = path.rstrip(".")
        raise ConfigError(
            f"{key}={config} is beyond float32's range (±{FLOAT32_MAX:.1e}), in which torch "
            f"computes; give {key} a smaller value"
        )


# The data group's keys that are run settings, not the source's (`fedlight.cli.job` keeps them out
# of the source's constructor).
DATA_SETTING_KEYS = tuple(f.name for f in fields(DataSettings))

# Upload stages that no driver asks for by name, in the order a client applies them (after
# privacy, before the wire; `fedlight.cli.build` builds them, `fedlight.stages.base` says what a
# stage is): a new stage kind in fedlight is its package, its YAMLs, its default in
# conf/config.yaml and one entry here; one of another package is an entry point (below).
BUILT_IN_CHAINED_GROUPS: dict[str, str] = {
    "secure_aggregation": (
        "masks that hide each upload in the sum (fedlight/stages/secure_aggregation)"
    ),
}
# Stage kinds of other packages: entry points of group `fedlight.stage_kinds` in their
# pyproject.toml, each `<kind> = "<module>:<class>"`, the class being the kind's default stage
# (what a run without an option of the group runs, usually one that does nothing). They come
# before fedlight's own chained kinds (secure aggregation masks the uploads: a stage after it
# would see ring elements), in the order of their names; their options' YAMLs are in `conf/<kind>/`
# beside the module (hydra_plugins.fedlight_stage_kinds puts it on Hydra's search path).
CHAINED_GROUPS: dict[str, str] = {}  # every chained kind in chain order (`register_stage_kinds`)
PLUGIN_STAGE_DEFAULTS: dict[str, str] = {}  # a plugged-in kind -> its default class, dotted
# Plugged-in kinds named like no config key (`bad-name!`), which no run can choose: left out of
# the groups (`fedlight.cli.build` says so, once per process), so that they stop no run.
UNNAMEABLE_STAGE_KINDS: dict[str, str] = {}

# Every config group, registered here and only here: its folder conf/<group>/ holds one YAML per
# option and its package (fedlight/<package>/, a stage kind's fedlight/stages/<package>/) one
# module per option (see fedlight.cli.build for what each one builds). The schema, the
# command-line checks and the run's choices derive from it.
GROUPS_BEFORE_CHAIN: dict[str, str] = {
    "algo": "the federated algorithm (fedlight/algorithms)",
    "data": "the dataset (fedlight/data)",
    "model": "the client LightningModule (fedlight/models)",
    "partition": "how training data is split among clients (fedlight/partitions)",
    "selection": "which clients take part in a round (fedlight/stages/selection)",
    "lr_schedule": "the clients' learning rate per round (fedlight/lr_schedules)",
    "attack": "which clients are malicious and what they send (fedlight/stages/attacks)",
    "aggregator": "how the server combines the uploads (fedlight/aggregation)",
    "server_opt": "how the server applies the aggregate (fedlight/server_opt)",
    "upload": "the uploads' codec: transforms in list order (fedlight/stages/compression, wire)",
    "download": (
        "the broadcast's codec: transforms in list order (fedlight/stages/compression, wire)"
    ),
    "privacy": "differential privacy: clipping, noise, accounting (fedlight/stages/privacy)",
}
GROUPS_AFTER_CHAIN: dict[str, str] = {
    "system": "client speeds on a virtual clock, deadlines, dropouts (fedlight/system)",
    "local_work": "the local epochs each participant trains in a round (fedlight/local_work)",
    "logger": "where metrics go besides metrics.csv (fedlight/loggers)",
}
CONFIG_GROUPS: dict[str, str] = {}  # filled by `register_stage_kinds`, in this order
SETTING_KEYS = (
    "seed",
    "fl",
    "local",
    "optim",
    "eval",
    "checkpoint",
    "console",
    "preemption",
    "device",
    "resume",
    "overwrite",
    "objective",
)


@dataclass
class FLSchema(FLSettings):
    """`fl` as the composed config may hold it: `num_clients` null where the partition gives the
    number of clients (`partition=natural`, `from_file`); the entry point puts that number in
    before FLSettings is built."""

    num_clients: int | None = 100  # type: ignore[assignment]
    # a count, or auto: the entry point puts in what auto chooses (`fedlight.drivers.workers`)
    workers: Any = "auto"

    def check_workers(self) -> None:
        """`auto` is settled by the entry point, for the run's algorithm and this process's
        threads; a number is checked as the settings check it."""
        if self.workers != "auto":
            super().check_workers()


def config_schema() -> type:
    """The schema of `conf/config.yaml`: plain settings plus one node per config group, and the
    table layout `fedlight report` uses for an experiment preset (see conf/experiment/)."""
    return make_dataclass(
        "ConfigSchema",
        [
            ("fl", FLSchema, field(default_factory=FLSchema)),
            *[(group, Any, None) for group in [*CONFIG_GROUPS, "report"]],
        ],
        bases=(RunSettings,),
    )


def register_stage_kinds(plugins: dict[str, str] | None = None) -> None:
    """Fill `CHAINED_GROUPS` and `CONFIG_GROUPS` (in place: other modules hold them) with the
    stage kinds `plugins` names (kind -> "module:Class"; None: the installed packages' entry
    points); a kind named like a key fedlight has is refused in one line, one named like no
    config key is left out (`UNNAMEABLE_STAGE_KINDS`)."""
    if plugins is None:
        plugins = plugged_kinds()
    UNNAMEABLE_STAGE_KINDS.clear()
    UNNAMEABLE_STAGE_KINDS.update({k: t for k, t in plugins.items() if not is_config_key(k)})
    plugins = {k: t for k, t in plugins.items() if k not in UNNAMEABLE_STAGE_KINDS}
    own = {*GROUPS_BEFORE_CHAIN, *BUILT_IN_CHAINED_GROUPS, *GROUPS_AFTER_CHAIN, *SETTING_KEYS}
    for kind, target in plugins.items():
        require(
            kind not in {*own, "report", "hydra"},
            f"the stage kind {kind} ({target}, entry point of {STAGE_KINDS_ENTRY_POINTS}) is "
            f"named like fedlight's own {kind}; rename it in its package's pyproject.toml",
        )
    PLUGIN_STAGE_DEFAULTS.clear()
    PLUGIN_STAGE_DEFAULTS.update({k: t.replace(":", ".") for k, t in plugins.items()})
    CHAINED_GROUPS.clear()
    for kind, target in sorted(plugins.items()):
        CHAINED_GROUPS[kind] = f"a stage kind of {target} (an entry point)"
    CHAINED_GROUPS.update(BUILT_IN_CHAINED_GROUPS)
    CONFIG_GROUPS.clear()
    CONFIG_GROUPS.update({**GROUPS_BEFORE_CHAIN, **CHAINED_GROUPS, **GROUPS_AFTER_CHAIN})


def is_config_key(name: str) -> bool:
    """Whether `name` can be a key of the schema (a Python identifier, not a keyword)."""
    return name.isidentifier() and not keyword.iskeyword(name)


def stage_kinds_registered() -> None:
    """The installed packages' stage kinds registered where this process has registered none:
    a job that a launcher runs in a process of its own (joblib's, Ray's, submitit's) imports the
    CLI without starting it (`register_configs`)."""
    if not CONFIG_GROUPS:
        register_stage_kinds()


def register_schema() -> None:
    """fedlight's schema in Hydra's config store, with the stage kinds registered so far (the
    installed packages' where none are)."""
    stage_kinds_registered()
    ConfigStore.instance().store(name="fedlight_schema", node=config_schema())


def register_configs() -> None:
    """What the command registers as it starts: the installed packages' stage kinds (a kind
    named like a key of fedlight's is a one-line ConfigError) and fedlight's schema (the Optuna
    sweeper's configs are YAML in fedlight/conf/hydra/sweeper)."""
    register_stage_kinds()
    register_schema()
