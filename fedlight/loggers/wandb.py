"""Weights & Biases: one W&B run per job, step = round, named after the job (`RunInfo.name`: its
overrides, or `logger.wandb.name`); the jobs of a sweep share a group, job_type is the algorithm,
the tags are the config-group choices (`algo=scaffold`, ...) and the config says each group by its
option's name (`algo: scaffold`, `flat_config`). With `logger.wandb.clients=table` (the default)
each round's per-client rows (`fedlight.loggers.clients`) go into one table, `clients` (a round
column, then the client's numbers; logged incrementally, so a killed run keeps its rounds), to sort
or chart clients by loss, update norm or time; none under secure aggregation. At the end the
run's figures (curves, label histogram, participation, local accuracies) are logged as images and,
with `logger.wandb.log_model` (the default), the final model.ckpt (model.pt where the module's
hyperparameters could not be pickled) as a `model` artifact of the run, aliased `final`.

A resumed run continues the W&B run of the run it resumes (`wandb.init(id=..., resume="allow")`),
whose id each run keeps in its directory (RUN_ID_FILE); the rounds a resume replays are logged
again where W&B does not hold them (online, below its `starting_step`; offline, every one: the
killed session may have flushed none), so no round is missing from the run.

Offline automatically when there is no API key or no network. An online run that W&B does not start
within `logger.wandb.init_timeout` seconds (no network, server down) or cannot start (no API key,
refused key) falls back to offline, said in one line on stderr; the user is never prompted for a
key. Any other W&B failure is reported once in one line and then ignored, so W&B trouble never
fails or loses a run (metrics.csv has everything).
"""

import json
import math
import os
import re
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from fedlight.core.errors import require
from fedlight.loggers.base import MetricsRow, RunInfo, flat_config
from fedlight.loggers.clients import CLIENT_COLUMNS
from fedlight.store.files import write_text
from fedlight.store.run_files import LIGHTNING_CHECKPOINT_NAME, MODEL_NAME, drawn_figures

MODES = ("auto", "online", "offline", "disabled")  # logger.wandb.mode
CLIENTS = ("table", "off")  # logger.wandb.clients
CLIENTS_TABLE = "clients"  # the table's key
ONLINE_MODES = ("online", "run")  # "run" is W&B's old name of online (WANDB_MODE=run)
DEFAULT_WANDB_HOST = "api.wandb.ai"
WAIT_FIX = "set logger.wandb.mode=offline to skip the wait, or a larger logger.wandb.init_timeout"
RUN_ID_FILE = "wandb_run.json"  # in a run directory: {"id": the W&B run it logs to}
RUN_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")  # what a W&B run id is; anything else is not used

# Why an online start failed in this process, if one did: later jobs (a sweep) go offline at once.
_online_failure: str | None = None

WANDB_TAG_LIMIT = 64  # W&B refuses a longer tag, and with it the run


def wandb_base_url() -> str:
    """The W&B server `wandb.init` talks to: WANDB_BASE_URL or the installed wandb's default."""
    url = os.environ.get("WANDB_BASE_URL")
    if url:
        return url
    try:
        import wandb

        return str(wandb.Settings().base_url)
    except Exception:  # noqa: BLE001 - only used for a credentials lookup and a probe
        return f"https://{DEFAULT_WANDB_HOST}"


def wandb_host() -> tuple[str, int]:
    parsed = urlparse(wandb_base_url())
    port = parsed.port or (80 if parsed.scheme == "http" else 443)
    return parsed.hostname or DEFAULT_WANDB_HOST, port


def has_api_key() -> bool:
    """Whether W&B has credentials, looked up as `wandb.init` does (WANDB_API_KEY, an identity
    token, .netrc, its settings files) but without prompting, printing or network."""
    try:
        from wandb.sdk.lib import wbauth

        found = wbauth.authenticate_session(
            host=wandb_base_url(), source="fedlight", prompt=False, update_session=False
        )
        return found is not None
    except Exception:  # noqa: BLE001 - another wandb version, or a malformed key: look ourselves
        pass
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    netrc = Path(os.environ.get("NETRC") or "~/.netrc").expanduser()
    try:
        return wandb_host()[0] in netrc.read_text()
    except OSError:
        return False


def network_reachable(timeout: float = 2.0) -> bool:
    try:
        socket.create_connection(wandb_host(), timeout=timeout).close()
        return True
    except OSError:
        return False


def choose_mode(requested: str) -> str:
    if requested != "auto":
        return requested
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    return "online" if has_api_key() and network_reachable() else "offline"


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0].strip() if text else type(error).__name__


def run_directory(run: Any) -> str:
    """Where an offline W&B run is written (what `wandb sync` takes)."""
    sync_dir = getattr(getattr(run, "settings", None), "sync_dir", None)
    if sync_dir:
        return str(sync_dir)
    files_dir = getattr(run, "dir", None)
    return str(Path(files_dir).parent) if files_dir else "the wandb directory"


def say(message: str) -> None:
    print(f"fedlight: {message}", file=sys.stderr, flush=True)


def kept_run_id(directory: Path) -> str | None:
    """The id of the W&B run that the run in `directory` logged to (RUN_ID_FILE), if it kept a
    readable one; the directory may be written by others, so only a W&B run id is taken."""
    path = directory / RUN_ID_FILE
    try:
        run_id = None if path.is_symlink() else json.loads(path.read_text()).get("id")
    except (OSError, ValueError, AttributeError):
        return None
    return run_id if isinstance(run_id, str) and RUN_ID.fullmatch(run_id) else None


@dataclass
class WandbLogger:
    project: str = "fedlight"
    entity: str | None = None
    mode: str = "auto"
    tags: list[str] = field(default_factory=list)
    init_timeout: float = 5.0  # seconds an online wandb.init may take before going offline
    name: str | None = None  # the W&B run's name; None: the job's (`RunInfo.name`)
    clients: str = "table"  # each round's per-client rows: a table, or off
    log_model: bool = True  # the final model.ckpt as an artifact
    _run: Any = field(default=None, init=False, repr=False)
    _output_dir: Path | None = field(default=None, init=False, repr=False)
    _table: Any = field(default=None, init=False, repr=False)  # the clients table, once begun
    _first_step: int = field(default=0, init=False, repr=False)  # the first W&B does not hold

    def __post_init__(self) -> None:
        require(
            self.mode in MODES,
            f"logger.wandb.mode={self.mode} is not an option; choose from: {', '.join(MODES)}",
        )
        timeout = self.init_timeout
        require(
            isinstance(timeout, int | float)
            and not isinstance(timeout, bool)
            and math.isfinite(timeout)
            and timeout > 0,
            f"logger.wandb.init_timeout={'null' if timeout is None else timeout} must be a finite"
            " number of seconds > 0 (e.g. 5)",
        )
        require(
            self.clients in CLIENTS,
            f"logger.wandb.clients={self.clients} is not an option; choose from: "
            f"{', '.join(CLIENTS)}",
        )
        require(
            isinstance(self.log_model, bool),
            f"logger.wandb.log_model={self.log_model} must be true or false",
        )

    def start(self, run: RunInfo) -> None:
        self._output_dir = run.output_dir
        self._start(run)
        if self._run is None:
            return
        self._first_step = int(getattr(self._run, "starting_step", 0) or 0)
        try:
            write_text(run.output_dir / RUN_ID_FILE, json.dumps({"id": self._run.id}) + "\n")
        except Exception as failure:  # noqa: BLE001 - W&B must never fail a run
            say(
                f"{RUN_ID_FILE} could not be written ({first_line(failure)}); a resume of this "
                "run will log to a new W&B run"
            )

    def init_args(self, run: RunInfo) -> dict[str, Any]:
        """`wandb.init`'s arguments for `run`; a resumed run's continue the W&B run its
        directory kept, if any (`kept_run_id`)."""
        args: dict[str, Any] = dict(
            project=self.project,
            entity=self.entity,
            name=self.name or run.name or None,
            dir=os.environ.get("WANDB_DIR", str(run.output_dir)),
            group=run.sweep_group,
            job_type=run.choices.get("algo"),
            config=flat_config(run.config, run.choices),
            tags=[
                *self.tags,
                *(choice_tag(group, choice) for group, choice in run.choices.items()),
            ],
            reinit="finish_previous",
        )
        continued = None if run.resumed_from is None else kept_run_id(run.resumed_from)
        if continued is not None:
            args |= {"id": continued, "resume": "allow"}
        return args

    def _start(self, run: RunInfo) -> None:
        """`wandb.init` in the mode chosen, falling back to offline (module docstring)."""
        try:
            import wandb

            mode = choose_mode(self.mode)
            init_args = self.init_args(run)
            if mode not in ONLINE_MODES:
                self._run = wandb.init(mode=mode, **init_args)
                return
            if not has_api_key():  # wandb.init would prompt for one (or fail without a terminal)
                self._start_offline(
                    wandb,
                    init_args,
                    "W&B has no API key",
                    "set WANDB_API_KEY or run `wandb login` to log online, "
                    "or set logger.wandb.mode=offline",
                )
                return
        except Exception as failure:  # noqa: BLE001 - W&B must never fail a run
            self._disable(failure)
            return
        global _online_failure
        if _online_failure is not None:  # the jobs of a sweep run in one process: wait once
            self._start_offline(wandb, init_args, f"{_online_failure} for an earlier job", WAIT_FIX)
            return
        started = time.monotonic()
        try:
            self._run = wandb.init(
                mode=mode, settings=wandb.Settings(init_timeout=self.init_timeout), **init_args
            )
        except Exception as failure:  # noqa: BLE001
            waited = time.monotonic() - started
            if waited >= self.init_timeout:
                _online_failure = f"W&B did not answer within {self.init_timeout:g} s"
            else:
                _online_failure = f"W&B could not start online ({first_line(failure)})"
            self._start_offline(wandb, init_args, _online_failure, WAIT_FIX)

    def _start_offline(self, wandb: Any, init_args: dict[str, Any], reason: str, fix: str) -> None:
        try:
            self._run = wandb.init(mode="offline", **init_args)
        except Exception as failure:  # noqa: BLE001
            self._disable(failure, f"{reason}, and offline")
            return
        where = run_directory(self._run)
        say(f"{reason}; logging offline to {where} (upload later: wandb sync {where}; {fix})")

    def log_round(self, row: MetricsRow) -> None:
        if self._run is None or int(row["round"]) < self._first_step:
            return
        try:
            self._run.log({k: v for k, v in row.items() if k != "round"}, step=int(row["round"]))
        except Exception as failure:  # noqa: BLE001
            self._disable(failure)

    def shows_clients(self) -> bool:
        """A table of clients, and a run to log it to (`start` ran; none after a failure or
        under mode=disabled's stand-in run, which logs nothing)."""
        return self._run is not None and self.clients != "off" and self.mode != "disabled"

    def log_clients(self, round_index: int, clients: Sequence[MetricsRow]) -> None:
        """The round's rows added to the clients table and the table logged (W&B's incremental
        mode uploads the new rows only). Its columns are those of the first round's rows: a name
        that first appears later is left out of the table."""
        if self._run is None or self.clients == "off" or not clients:
            return
        if round_index < self._first_step:  # W&B holds the round (a resumed run)
            return
        try:
            import wandb

            if self._table is None:
                extra = sorted({name for row in clients for name in row} - set(CLIENT_COLUMNS))
                self._table = wandb.Table(
                    columns=["round", *CLIENT_COLUMNS, *extra], log_mode="INCREMENTAL"
                )
            for row in clients:
                self._table.add_data(round_index, *(row.get(c) for c in self._table.columns[1:]))
            self._run.log({CLIENTS_TABLE: self._table}, step=round_index)
        except Exception as failure:  # noqa: BLE001
            self._disable(failure)

    def finish(self, summary: dict[str, Any]) -> None:
        if self._run is None:
            return
        try:
            import wandb

            assert self._output_dir is not None
            figures = drawn_figures(self._output_dir)
            images = {f"figures/{path.stem}": wandb.Image(str(path)) for path in figures}
            if images:
                self._run.log(images)
            # the config is the run's W&B config already, by option name (no class paths)
            self._run.summary.update({k: v for k, v in summary.items() if k != "config"})
            if self.log_model:
                self.log_final_model(wandb, self._output_dir)
            self._run.finish()
        except Exception as failure:  # noqa: BLE001
            self._disable(failure)

    def log_final_model(self, wandb: Any, output_dir: Path) -> None:
        """model.ckpt (else model.pt) as the run's `model` artifact, aliased `final`."""
        files = [output_dir / name for name in (LIGHTNING_CHECKPOINT_NAME, MODEL_NAME)]
        model = next((path for path in files if path.exists()), None)
        if model is None:
            return
        artifact = wandb.Artifact(f"model-{self._run.id}", type="model")
        artifact.add_file(str(model))
        self._run.log_artifact(artifact, aliases=["final"])

    def _disable(self, failure: Exception, context: str = "W&B") -> None:
        say(f"{context} failed ({first_line(failure)}); W&B logging disabled (metrics.csv has all)")
        self._run = None


def choice_tag(group: str, choice: str) -> str:
    """`group=choice` as a W&B tag: a choice too long for one (a class path of one's own,
    `model._target_=...`, which the run records as its choice) keeps its end, the class."""
    tag = f"{group}={choice}"
    if len(tag) <= WANDB_TAG_LIMIT:
        return tag
    return f"{group}=…{choice[len(tag) - WANDB_TAG_LIMIT + 1 :]}"
