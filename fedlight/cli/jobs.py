"""The jobs a command line describes, composed by Hydra's own config loader and listed by the
sweeper the command chooses, so that every job can be checked before any of them works.

fedlight does not expand sweeps itself: for a sweeper that fixes its jobs in advance (Hydra's basic
sweeper: the product of the command's and the preset's `hydra.sweeper.params` lists) the sweeper
itself runs with a launcher that only composes each job (`ListingLauncher`). A sweeper that chooses
its jobs from the results of earlier ones (Optuna's) cannot be listed; each of its parameters is
checked at every value it can list (the options of a choice, both ends of an interval), one
parameter at a time, the others at their first value. Hydra is set up as the command's own Hydra
run sets itself up (`command_hydra`: `--config-dir` where Hydra's command line puts it); search
paths, sweepers and launchers of other packages are Hydra's to resolve.
"""

import copy
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import hydra
from hydra._internal.hydra import Hydra
from hydra.core.config_loader import ConfigLoader
from hydra.core.config_search_path import SearchPathQuery
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import IntervalSweep, Override
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn, JobRuntime, JobStatus
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, RunMode, TaskFunction
from omegaconf import DictConfig, open_dict, read_write

from fedlight.cli.schema import CONF_DIR
from fedlight.core.errors import require

MULTIRUN_FLAGS = ("-m", "--multirun")
LIST_JOBS_FLAG = "--list-jobs"
# Hydra's flags that take a value, and those of them fedlight reads
VALUE_FLAGS = ("--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd")
# The sweeper whose jobs are known before the first runs (Hydra's `hydra/sweeper=basic`)
LISTING_SWEEPERS = ("hydra._internal.core_plugins.basic_sweeper.BasicSweeper",)


@dataclass
class Command:
    """A command line as Hydra reads it: its overrides and the flags that change what it runs."""

    overrides: list[str]
    multirun: bool = False
    config_name: str = "config"
    config_dir: str | None = None  # the last `--config-dir` (Hydra's command line keeps it)
    list_jobs: bool = False

    @property
    def hydra_args(self) -> list[str]:
        """What Hydra is given: the command without fedlight's own flag."""
        flags = ["--multirun"] if self.multirun else []
        flags += ["--config-name", self.config_name] if self.config_name != "config" else []
        flags += ["--config-dir", self.config_dir] if self.config_dir is not None else []
        return [*flags, *self.overrides]


def parse_command(args: Sequence[str]) -> Command | None:
    """The command `args` describe; None where a flag makes Hydra answer without running a job
    (`--help`, `--cfg job`, `--info`), or one fedlight does not know (Hydra says what it is)."""
    command = Command(overrides=[])
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        flag, equals, value = arg.partition("=")
        if arg in MULTIRUN_FLAGS:
            command.multirun = True
        elif arg == LIST_JOBS_FLAG:
            command.list_jobs = True
        elif flag in VALUE_FLAGS and flag not in ("--config-path", "-cp"):
            if not equals:
                if not rest:
                    return None  # Hydra says the flag needs a value
                value = rest.pop(0)
            if flag in ("--config-name", "-cn"):
                command.config_name = value
            else:
                command.config_dir = value
        elif arg.startswith("-") and not arg.startswith("--="):
            return None
        else:
            command.overrides.append(arg)
    return command


def given_value(overrides: list[str], key: str) -> str | None:
    """The value the command line gives `key` (its last override), None where none does."""
    given = [o for o in overrides if o.split("=")[0].lstrip("+") == key]
    if not given:
        return None
    return str(OverridesParser.create().parse_overrides(given[-1:])[0].value())


class JobCompositionError(Exception):
    """Hydra could not compose one job of the command (the cause says why)."""

    def __init__(self, overrides: list[str]) -> None:
        super().__init__(" ".join(overrides))
        self.overrides = overrides


@dataclass
class ComposedJob:
    overrides: list[str]
    config: DictConfig  # with its `hydra` node (runtime choices, sweep and run directories)
    refused: str | None = None  # why the job cannot run (listed by `--list-jobs`, not run)

    def directory(self, multirun: bool) -> Path:
        """Where the job writes: the run directory, or its folder of the sweep directory."""
        hydra = self.config.hydra
        if not multirun:
            return Path(str(hydra.run.dir))
        return Path(str(hydra.sweep.dir)) / str(hydra.sweep.subdir)


@dataclass
class Jobs:
    """Every job of the command that can be known before it runs, composed."""

    jobs: list[ComposedJob]
    sweeper: str | None = None  # a sweeper that chooses its jobs as it runs; None: all listed

    @property
    def complete(self) -> bool:
        return self.sweeper is None


class ListingLauncher(Launcher):
    """A launcher that composes the jobs a sweeper hands it, as Hydra's launchers do, and runs
    none: the sweeper's own expansion, written nowhere."""

    def __init__(self) -> None:
        self.composed: list[ComposedJob] = []
        self.context: HydraContext | None = None
        self.config: DictConfig | None = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.context, self.config = hydra_context, config

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        assert self.context is not None and self.config is not None
        returns = []
        for number, overrides in enumerate(job_overrides, start=initial_job_idx):
            composed = compose_job(self.context, self.config, list(overrides), number)
            self.composed.append(composed)
            returns.append(JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED))
        return returns


def compose_job(
    context: HydraContext, config: DictConfig, overrides: list[str], number: int = 0
) -> ComposedJob:
    """A job's config as Hydra's launchers compose it, numbered as they number it (its
    `hydra.sweep.subdir` is `${hydra.job.num}` by default)."""
    try:
        composed = context.config_loader.load_sweep_config(config, overrides)
    except Exception as error:
        raise JobCompositionError(overrides) from error
    with open_dict(composed.hydra.job):
        composed.hydra.job.id = number
        composed.hydra.job.num = number
    return ComposedJob(overrides, composed)


@contextmanager
def command_hydra(command: Command) -> Iterator[ConfigLoader]:
    """Hydra's config loader as the command's own Hydra run has it: fedlight's configs, and the
    `--config-dir` searched before the schema (where Hydra's command line puts it, so that the
    primary config `--config-name` names may live there). `Hydra.create_main_hydra2` is how
    Hydra's own entry makes it; `initialize_config_dir` restores the global state after."""
    with hydra.initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        if command.config_dir is not None:
            search_path = copy.deepcopy(loader.get_search_path())
            search_path.prepend(
                provider="command-line",
                path=f"file://{Path(command.config_dir).resolve()}",
                anchor=SearchPathQuery(provider="schema"),
            )
            name = str(JobRuntime.instance().get("name"))
            GlobalHydra.instance().clear()
            loader = Hydra.create_main_hydra2(name, search_path).config_loader
        yield loader


def compose_command(command: Command, master: Callable[[list[str], RunMode], DictConfig]) -> Jobs:
    """The command's jobs: the run, or each job of the sweep that its sweeper can list (see the
    module docstring); `master` composes the command's config as Hydra's run or multirun does."""
    overrides = command.overrides
    mode = RunMode.MULTIRUN if command.multirun else RunMode.RUN
    try:
        config = master(overrides, mode)
    except Exception as error:
        raise JobCompositionError(overrides) from error
    if not command.multirun:
        return Jobs([ComposedJob(overrides, config)])
    loader = GlobalHydra.instance().config_loader()
    context = HydraContext(config_loader=loader, callbacks=None)  # type: ignore[arg-type]
    sweeper_target = str(config.hydra.sweeper.get("_target_", ""))
    task = list(config.hydra.overrides.task)
    if sweeper_target not in LISTING_SWEEPERS:
        probes = parameter_probes(config, task, OverridesParser.create(config_loader=loader))
        jobs = [compose_job(context, config, job) for job in probes]
        return Jobs(jobs, sweeper=sweeper_target)
    with tempfile.TemporaryDirectory(prefix="fedlight-jobs-") as scratch, read_write(config):
        config.hydra.sweep.dir = scratch  # the basic sweeper records multirun.yaml there
        HydraConfig.instance().set_config(config)
        sweeper = Plugins.instance().instantiate_sweeper(
            config=config, hydra_context=context, task_function=lambda _: None
        )
        launcher = ListingLauncher()
        launcher.setup(hydra_context=context, task_function=lambda _: None, config=config)
        sweeper.launcher = launcher  # type: ignore[attr-defined]
        try:
            sweeper.sweep(arguments=task)
        except JobCompositionError:
            raise
        except Exception as error:
            raise JobCompositionError(task) from error
    return Jobs(launcher.composed)


def parameter_probes(
    config: DictConfig, task: list[str], parser: OverridesParser
) -> list[list[str]]:
    """Jobs that put each sweep parameter of an optimizing sweeper (its `params` and the
    command's sweeps) at each value it can list, the others at their first: every value checked
    without running the sweeper, whose next jobs depend on the results of earlier ones
    (`parser` has the config loader a `glob()` lists a group's options with)."""
    declared = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    by_key: dict[str, Override] = {}
    for override in parser.parse_overrides([*declared, *task]):
        by_key[override.key_or_group] = override
    options = [listed_values(o) for o in by_key.values()]
    first = [values[0] for values in options]
    probes = [first]
    for index, values in enumerate(options):
        for value in values[1:]:
            probes.append([*first[:index], value, *first[index + 1 :]])
    return probes


def listed_values(override: Override) -> list[str]:
    """A sweep override as the overrides of its values that can be listed: a choice's options,
    an interval's two ends; any other override as it is."""
    if not override.is_sweep_override():
        return [override.input_line]
    key = override.get_key_element()
    value = override.value()
    if isinstance(value, IntervalSweep):  # tag(int, ...): whole numbers
        ends = [int(e) if "int" in value.tags else e for e in (value.start, value.end)]
        return [f"{key}={end}" for end in ends]
    listed = [f"{key}={v}" for v in override.sweep_string_iterator()]
    require(bool(listed), f"{override.input_line} lists no value; give a sweep of at least one")
    return listed


def job_lines(jobs: Jobs, sweep_dir: str | None) -> list[str]:
    """`--list-jobs`: one line per job, its number and overrides, and a refused job's reason
    (a sweeper that chooses its jobs as it runs says so instead, and names each refused
    probe)."""
    refused = [job for job in jobs.jobs if job.refused]
    if not jobs.complete:
        passed = (
            "were composed and passed" if not refused else f"were composed, {len(refused)} refused"
        )
        return [
            f"{jobs.sweeper} chooses each job from the results of earlier ones: its jobs cannot "
            f"be listed before it runs; {len(jobs.jobs)} jobs checking each parameter's values "
            f"{passed}",
            *(f"refused: {' '.join(job.overrides)}: {job.refused}" for job in refused),
        ]
    where = f" into {sweep_dir}" if sweep_dir else ""
    lines = [f"{len(jobs.jobs)} jobs{where}:"]
    for index, job in enumerate(jobs.jobs):
        mark = f"  [refused: {job.refused}]" if job.refused else ""
        lines.append(f"{index}: {' '.join(job.overrides)}{mark}")
    return lines


def refused_line(jobs: Jobs) -> str | None:
    """What `--list-jobs` ends with where jobs are refused (None where every job can run)."""
    refused = sum(job.refused is not None for job in jobs.jobs)
    if not refused:
        return None
    some = "is" if refused == 1 else "are"
    return (
        f"{refused} of the command's {len(jobs.jobs)} jobs {some} refused (marked above): it runs "
        "none until each is fixed, or left out of the sweep (glob(..., exclude=[...]))"
    )
