"""Entry point: Hydra composes the config; it is validated, turned into typed objects, and run.

The `cli` layer is the only code that sees a `DictConfig`. Bad settings are caught before any
work, for every job of a sweep (`fedlight.cli.validate`), and reported on one line that names the
key and what is allowed.
"""

import json
import os
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any, NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from fedlight import STARTED, STARTED_VARIABLE
from fedlight.cli.job import build_job, group_choices, settle_progress
from fedlight.cli.jobs import given_value, job_lines, parse_command, refused_line
from fedlight.cli.output import (
    JobFailedError,
    cannot_write,
    check_output_dir,
    console_saved,
    continue_command,
    interrupted,
    job_failed,
    non_default_settings,
    writes_run_dir,
    writing,
)
from fedlight.cli.resume import decided, decisions_line, resume_decision, with_saved_overrides
from fedlight.cli.schema import CONF_DIR, register_configs, stage_kinds_registered
from fedlight.cli.study_trial import with_trial_reporter
from fedlight.cli.validate import checked_jobs
from fedlight.core.errors import ConfigError, fail
from fedlight.data.base import DataError
from fedlight.drivers.preemption import PREEMPTED_EXIT_CODE, Preempted, requeue_on_slurm, watched
from fedlight.drivers.workers import WorkerError
from fedlight.loggers.base import job_name
from fedlight.loggers.console import sweep_line
from fedlight.runs import run_dir
from fedlight.runs.experiment import run_job
from fedlight.runs.job import DivergenceError, Job
from fedlight.runs.launch import Terminated
from fedlight.runs.resume import Decision
from fedlight.store.client_states import ClientStateLostError
from fedlight.store.files import write_text
from fedlight.store.run_files import PREEMPTED_NAME
from fedlight.store.sweeps import (
    COMMAND_VARIABLE,
    SWEEP_JOBS_VARIABLE,
    command_value,
    end_with_command,
    expected_jobs,
)


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def hydra_entry(cfg: DictConfig) -> float | int | None:
    """One job (`run_hydra_job`); a job of a sweep says where the sweep stands as it starts and
    as it ends, however it ends."""
    stage_kinds_registered()  # in a launcher's process of its own, which ran no `main`
    hydra_cfg = HydraConfig.get()
    end_with_command()
    settle_progress(cfg)
    sweep = shown_sweep(cfg, hydra_cfg)
    try:
        return run_hydra_job(cfg, hydra_cfg, sweep)
    finally:
        if sweep is not None:
            print(sweep_line(sweep, expected_jobs()), file=sys.stderr, flush=True)


def shown_sweep(cfg: DictConfig, hydra_cfg: DictConfig) -> Path | None:
    """The sweep directory of this job, where it shows its progress (and writes its run dir)."""
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    if not multirun or not writes_run_dir() or cfg.console.progress == "off":
        return None
    return Path(hydra_cfg.sweep.dir)


def run_hydra_job(cfg: DictConfig, hydra_cfg: DictConfig, sweep: Path | None) -> float | int | None:
    """One job: run, and its `objective` returned to Hydra's sweeper (None where the job
    diverged and the sweep goes on); `sweep`: the sweep directory whose state it says."""
    choices = group_choices(cfg, hydra_cfg.runtime.choices)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    sweep_group = hydra_cfg.sweep.dir if multirun else None
    output_dir = Path(hydra_cfg.runtime.output_dir)
    setting = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    try:
        name = job_name(list(hydra_cfg.overrides.task), output_dir)
        job = build_job(cfg, choices, sweep_group, announce=writes_run_dir(), name=name)
        decision = resume_decision(job, output_dir)
        if decision.said:
            print(f"fedlight: {output_dir}: {decision.said}", flush=True)
        if decision.summary is not None:  # its files are left as they are
            return decision.summary.get(job.settings.objective)
        job = with_trial_reporter(decided(job, decision), hydra_cfg)
        with writing(output_dir, setting, job.settings), console_saved(output_dir):
            if writes_run_dir():
                print(f"fedlight: run directory {output_dir}", flush=True)
                search_path = [
                    o for o in hydra_cfg.overrides.hydra if o.startswith("hydra.searchpath=")
                ]
                changed = non_default_settings(cfg, job.config, choices, search_path)
                print(f"fedlight: settings {' '.join(changed) or '(all defaults)'}", flush=True)
            if sweep is not None:
                print(sweep_line(sweep, expected_jobs()), file=sys.stderr, flush=True)
            summary = run_until_preempted(job, output_dir)
        return summary.get(job.settings.objective)
    except (ConfigError, DataError) as error:
        job_failed(str(error), 2, multirun, output_dir)
    except WorkerError as error:
        job_failed(str(error), error.exit_code, multirun, output_dir)
    except ClientStateLostError as error:
        job_failed(str(error), 1, multirun, output_dir)
    except DivergenceError as error:
        if not multirun:
            fail(str(error), 3)
        # One diverged job is a result of the sweep, not its end: said, and the next job runs
        # (`fedlight report` marks the job and leaves it out of mean ± std).
        print(f"fedlight: {output_dir}: {error}", file=sys.stderr)
        return None
    except KeyboardInterrupt:
        print(interrupted(output_dir, list(hydra_cfg.overrides.task)), file=sys.stderr)
        sys.exit(130)
    except Terminated:  # SIGTERM while workers ran: they are stopped
        overrides = list(hydra_cfg.overrides.task)
        print(interrupted(output_dir, overrides, "terminated"), file=sys.stderr)
        sys.exit(143)
    except OSError as error:
        job_failed(cannot_write(error, output_dir), 1, multirun, output_dir)


def run_until_preempted(job: Job, output_dir: Path) -> dict[str, Any]:
    """The job's summary; a preemption signal (`fedlight.drivers.preemption`) ends the process with
    PREEMPTED_EXIT_CODE once the checkpoint is written, and the directory is marked to resume
    on its own (`preempted.json`), after the handler that was there before (submitit's
    checkpoint-and-requeue) or SLURM's requeue (`preemption.requeue`)."""
    with watched(job.settings.preemption.signals) as watch:
        try:
            return run_job(job, output_dir)
        except Preempted as stop:
            if writes_run_dir():
                marker = {"signal": stop.signal_name, "after_round": stop.round_index}
                write_text(output_dir / PREEMPTED_NAME, json.dumps(marker) + "\n")
            print(
                f"fedlight: preempted ({stop.signal_name}) after round {stop.round_index}; "
                "checkpoint written: the run continues on its own when its command runs again, "
                f"or with: {continue_command(output_dir, job.sweep_group)}",
                file=sys.stderr,
                flush=True,
            )
            watch.chain()
            requeued = requeue_on_slurm(job.settings.preemption.requeue)
            if requeued:
                print(f"fedlight: {requeued}", file=sys.stderr, flush=True)
            sys.exit(PREEMPTED_EXIT_CODE)


def main() -> None:
    """`fedlight [overrides]`: every job of the command checked, then run by Hydra. From before
    it locks a directory, a preemption signal only takes note (`fedlight.drivers.preemption`):
    the run, or each job of the sweep, ends its round, writes its checkpoint and exits 75, and a
    sweep whose jobs run in other processes (joblib's) waits for them to, instead of dying at
    once."""
    os.environ[STARTED_VARIABLE] = repr(STARTED)
    os.environ[COMMAND_VARIABLE] = command_value()
    try:
        register_configs()
    except ConfigError as error:  # an installed package's stage kind fedlight refuses
        fail(str(error), 2)
    command = parse_command(sys.argv[1:])
    locked = None
    with ExitStack() as noticing:
        if command is not None:  # not a Hydra flag that answers on its own (--help, --cfg job)
            try:
                command = with_saved_overrides(command)
                jobs, checked = checked_jobs(command)
                if command.list_jobs:
                    sweep_dir = given_value(command.overrides, "hydra.sweep.dir")
                    print("\n".join(job_lines(jobs, sweep_dir)), flush=True)
                    if (refused := refused_line(jobs)) is not None:
                        fail(refused, 2)
                    sys.exit(0)
                decisions = [decision for _, _, decision in checked]
                if not command.multirun and decisions and all(d.skips for d in decisions):
                    finished(decisions[0])
                decided_line = decisions_line(decisions)
                os.environ.pop(SWEEP_JOBS_VARIABLE, None)  # a sweep's count, set afresh
                if command.multirun and jobs.complete:
                    os.environ[SWEEP_JOBS_VARIABLE] = str(len(jobs.jobs))
                notices = {n: None for _, s, _ in checked for n in s.preemption.signals}
                noticing.enter_context(watched(list(notices)))
                writing = [job_settings for _, job_settings, d in checked if not d.skips]
                if writing:  # a finished run that resume=auto leaves alone is not prepared
                    locked = check_output_dir(
                        command.overrides, command.multirun, writing, bool(decided_line)
                    )
                if command.multirun and decided_line:  # said once the sweep may go ahead
                    print(decided_line, file=sys.stderr, flush=True)
            except ConfigError as error:
                fail(str(error), 2)
            sys.argv = [sys.argv[0], *command.hydra_args]
        run_hydra(locked)


def finished(decision: Decision) -> NoReturn:
    """A run that is finished with this config and asked for no more rounds: said, and the
    command ends before Hydra writes anything (its directory is left as the run left it)."""
    print(f"fedlight: {decision.finished_in}: {decision.said}", flush=True)
    sys.exit(0)


def run_hydra(locked: Path | None) -> None:
    """Hydra's run of the command's jobs; `locked`: the directory the command locked (released
    once its last job has ended)."""
    try:
        hydra_entry()
    except JobFailedError as failed:  # HYDRA_FULL_ERROR=1: Hydra raises it instead
        print(failed, file=sys.stderr)
        sys.exit(failed.code)
    except SystemExit as exiting:
        # Hydra reports a failed job's error and exits 1 while handling it: exit with its code
        failed = exiting.__context__
        if isinstance(failed, JobFailedError):
            sys.exit(failed.code)
        raise
    finally:  # a sweep's directory: its lock is held until its last job has ended
        if locked is not None:
            run_dir.release(locked)
