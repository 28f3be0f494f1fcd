"""The pluggable stages of a round, built from their config groups (see `CONFIG_GROUPS`).

`build_stages` is where the composed config meets the code: each group's option is instantiated
by its `_target_`, and the aggregator and server optimizer are passed into the algorithm (fedjax's
style) instead of being inherited by it. A combination that makes no sense is refused here, in one
line that says why, before any work. What it builds is the round's `Stages` record
(`fedlight.round.stages`).
"""

import dataclasses
import re
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf

from fedlight.algorithms.base import Algorithm
from fedlight.cli.schema import (
    CHAINED_GROUPS,
    CONF_DIR,
    PLUGIN_STAGE_DEFAULTS,
    STAGE_KINDS_ENTRY_POINTS,
    UNNAMEABLE_STAGE_KINDS,
)
from fedlight.core.errors import ConfigError, one_line, require
from fedlight.round.stages import Stages
from fedlight.stages.attacks.base import Attack
from fedlight.stages.base import UploadStage
from fedlight.stages.selection.base import Selection
from fedlight.stages.wire.base import DOWNLOAD, UPLOAD, Wire, WireTransform
from fedlight.system.base import System

INJECTED = ("aggregator", "server_opt")  # groups whose objects the algorithm receives
WARNED: set[str] = set()  # the warnings this process gave (`warn_once`)


def instantiate_group(cfg: DictConfig, group: str, **injected: Any) -> Any:
    """The object of a group's chosen option, with `injected` objects passed to its constructor
    as they are; a setting it refuses is a one-line ConfigError."""
    try:
        if not injected:
            return hydra.utils.instantiate(OmegaConf.select(cfg, group))
        build = hydra.utils.instantiate(OmegaConf.select(cfg, group), _partial_=True)
        return build(**injected)
    except InstantiationException as error:
        cause = error.__cause__
        if isinstance(cause, ConfigError):
            raise cause from None
        raise ConfigError(f"{group}: {cause or error}".replace("\n", " ")) from None


def default_option(group: str) -> str:
    """The option conf/config.yaml's defaults list picks for `group`."""
    defaults = OmegaConf.load(Path(CONF_DIR) / "config.yaml").defaults
    for entry in defaults:
        if isinstance(entry, DictConfig) and group in entry:
            return str(entry[group])
    raise KeyError(group)


def at_default(cfg: DictConfig, group: str) -> bool:
    """Whether the group's node is exactly its default option's YAML (option and values)."""
    default = OmegaConf.load(Path(CONF_DIR) / group / f"{default_option(group)}.yaml")
    return OmegaConf.to_container(cfg[group], resolve=True) == OmegaConf.to_container(default)


def build_algorithm(cfg: DictConfig, choices: dict[str, str]) -> Algorithm:
    """The algorithm with the aggregator and server optimizer it accepts passed in; one it does
    not accept must be at its default (it would do nothing)."""
    algo_class = hydra.utils.get_class(cfg.algo._target_)
    accepted = {f.name for f in dataclasses.fields(algo_class) if f.init}
    injected = {}
    for group in INJECTED:
        component = instantiate_group(cfg, group)
        if group in accepted:
            injected[group] = component
        elif not at_default(cfg, group):
            algo = choices.get("algo", algo_class.__name__)
            raise ConfigError(
                f"{group}={choices.get(group, cfg[group]._target_)} (or its settings) does not "
                f"apply to algo={algo}: {algo_class.fixed_server}; leave {group} at its default"
            )
    algorithm = instantiate_group(cfg, "algo", **injected)
    if "aggregator" in injected:
        algorithm.aggregator.check(cfg.fl.clients_per_round)
    return algorithm


def build_stages(cfg: DictConfig, choices: dict[str, str]) -> Stages:
    algorithm = build_algorithm(cfg, choices)
    exchange = OmegaConf.select(cfg, "fl.exchange")
    require(
        exchange != "sums" or not algorithm.aggregator.holds_updates,
        f"fl.exchange=sums needs a linear aggregator and aggregator={choices.get('aggregator')} "
        "holds every update; use fl.exchange=uploads",
    )
    attack: Attack = instantiate_group(cfg, "attack")
    if attack.num_malicious(cfg.fl.num_clients):
        name = choices.get("attack", type(attack).__name__)
        require(
            bool(algorithm.parts),
            f"attack={name} does not apply to algo={choices.get('algo')}: it aggregates no "
            "client updates; use an algorithm that does (e.g. algo=fedavg)",
        )
        require(
            exchange != "sums" or not attack.after_gather,
            f"fl.exchange=sums cannot run attack={name}: it forges from every upload of the "
            "round after the gather; use fl.exchange=uploads",
        )
    wire = build_wire(cfg, exchange)
    selection: Selection = instantiate_group(cfg, "selection")
    selection.check(cfg.fl.num_clients, cfg.fl.clients_per_round)
    why = algorithm.needs_sampling_by_size
    require(
        why is None or selection.draws_by_size,
        f"selection={choices.get('selection')} with {why}; add selection=proportional",
    )
    system: System = instantiate_group(cfg, "system")
    require(
        system.clocked or cfg.eval.every_seconds is None,
        f"eval.every_seconds={cfg.eval.every_seconds} counts virtual seconds, which need a "
        "system model; choose one, e.g. system=tiers, or use eval.every",
    )
    stages = Stages(
        algorithm=algorithm,
        selection=selection,
        lr_schedule=instantiate_group(cfg, "lr_schedule"),
        wire=wire,
        attack=attack,
        privacy=instantiate_group(cfg, "privacy"),
        system=system,
        chained=chained_stages(cfg),
        local_work=instantiate_group(cfg, "local_work"),
    )
    if algorithm.asynchronous:
        check_asynchronous(cfg, choices, stages)
    return stages


def chained_stages(cfg: DictConfig) -> tuple[UploadStage, ...]:
    """The chained kinds' stages in chain order. A broken kind of another package stops only
    the runs that choose it: one named like no config key (which no run can choose), and one
    whose default class does not import where the run chooses no option of it, are left out
    and said (`warn_once`)."""
    for kind, target in UNNAMEABLE_STAGE_KINDS.items():
        warn_once(
            f"the stage kind {kind!r} ({target}, entry point of {STAGE_KINDS_ENTRY_POINTS}) is "
            "left out: its name is no config key (letters, digits and _, not a digit first); "
            "rename it in its package's pyproject.toml"
        )
    stages = []
    for group in CHAINED_GROUPS:
        if OmegaConf.select(cfg, group) is None and group in PLUGIN_STAGE_DEFAULTS:
            stage = plugged_default(group)
        else:
            stage = instantiate_group(cfg, group)
        if stage is None:
            continue
        require(
            isinstance(stage, UploadStage) and stage.name == group,
            f"{group}: {type(stage).__qualname__} is no UploadStage named {group!r} (a stage "
            f"kind's stages subclass fedlight.UploadStage and set name = {group!r})",
        )
        stages.append(stage)
    return tuple(stages)


def plugged_default(group: str) -> UploadStage | None:
    """A plugged-in kind's default stage (the entry point's class) for a run that chooses no
    option of it; None, said, where its class cannot be imported."""
    target = PLUGIN_STAGE_DEFAULTS[group]
    try:
        stage_class = hydra.utils.get_class(target)
    except (ImportError, ValueError) as error:  # hydra's, with what the import raised as cause
        reason = error.__cause__ or error
        warn_once(
            f"the stage kind {group} ({target}) is left out of the runs that choose no option of "
            f"it: its class cannot be imported ({type(reason).__name__}: "
            f"{one_line(reason, limit=160)}); a run that chooses one fails"
        )
        return None
    return stage_class()


def warn_once(message: str) -> None:
    """`message` as a warning, once per process: it is of the installed packages, the same for
    every job (and a command builds each job twice, to check it and to run it)."""
    if message not in WARNED:
        WARNED.add(message)
        print(f"fedlight: warning: {message}", file=sys.stderr, flush=True)


def build_chain(cfg: DictConfig, direction: str) -> dict[str, WireTransform]:
    """The `direction` group's transforms (`upload=[topk,fp16]`), each named by its option, in
    the order the sender applies them."""
    chain = {}
    for name in cfg[direction] or {}:
        try:
            chain[str(name)] = instantiate_group(cfg, f"{direction}.{name}")
        except ConfigError as error:
            # A transform names its settings by its module (`compression.ratio=2 must be ...`);
            # here they are settings of this group's option.
            message = re.sub(r"^(compression|wire)\.", f"{direction}.{name}.", str(error))
            raise ConfigError(message) from None
    return chain


def build_wire(cfg: DictConfig, exchange: str | None) -> Wire:
    """One `Wire` out of the `upload` and `download` groups, each chain in its list's order."""
    upload, download = build_chain(cfg, UPLOAD), build_chain(cfg, DOWNLOAD)
    for name, transform in download.items():
        require(
            not transform.sender_state,
            f"download.{name}.error_feedback=true: the server sends one model to all clients and "
            f"keeps no residual per client; set download.{name}.error_feedback=false",
        )
    for name, transform in upload.items():
        require(
            exchange != "sums" or not transform.receiver_state,
            f"fl.exchange=sums cannot run {name} in upload: its server side keeps state that must "
            f"see every upload in order; use fl.exchange=uploads (or leave {name} out of upload)",
        )
    return Wire(upload=upload, download=download)


def check_asynchronous(cfg: DictConfig, choices: dict[str, str], stages: Stages) -> None:
    """What the asynchronous driver (`fedlight.drivers.asynchronous`) cannot run, refused in one
    line; each upload stage says why it cannot (`UploadStage.asynchronous_refusal`)."""
    algo, system = choices.get("algo"), stages.system
    require(
        system.clocked,
        f"algo={algo} runs on the system's virtual clock; choose a system model, e.g. "
        "system=tiers or system=homogeneous",
    )
    require(
        system.deadline is None,
        f"algo={algo} has no rounds to set a deadline for; leave system.deadline at its default "
        "(system.dropout makes clients drawn for a slot unavailable)",
    )
    require(
        cfg.fl.workers in (1, "auto"),
        f"algo={algo} runs its event queue in one process; use fl.workers=1",
    )
    reason = stages.local_work.asynchronous_refusal()
    require(
        reason is None,
        f"local_work={choices.get('local_work')} does not apply to algo={algo}: {reason}",
    )
    for stage in stages.upload:
        reason = stage.asynchronous_refusal()
        require(
            reason is None,
            f"{stage.name}={choices.get(stage.name)} does not apply to algo={algo}: {reason}",
        )
