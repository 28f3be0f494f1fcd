"""Typed settings of a run: what the rest of fedlight reads (`RunSettings` and its parts), each
checked as it is built.

Plain dataclasses of plain values: the CLI makes Hydra's schema of them (`fedlight.cli.schema`)
and turns the composed config into them (`fedlight.cli.job`); no `DictConfig` comes below it.
"""

import re
import signal
from dataclasses import dataclass, field

from fedlight.core.allocator import MAX_THRESHOLD_MB
from fedlight.core.errors import ConfigError, require
from fedlight.core.objectives import OBJECTIVES

# Top-level settings that say where and how a run is written or shown, not what it computes: a
# run's name leaves them out (a resumed run keeps the name of the run it continues), and so do a
# report's cells (the same run shown with another console gives the same numbers).
OUTPUT_ONLY = ("resume", "overwrite", "logger", "console", "hydra")


def output_only(override_key: str) -> bool:
    """Whether an override (`console.progress=lines`, `+logger=wandb`, or its key alone) only
    says where or how a run is written or shown (OUTPUT_ONLY)."""
    return override_key.lstrip("+~").partition("=")[0].split(".")[0] in OUTPUT_ONLY


# Signals a run cannot take as a preemption notice: Ctrl-C has its own meaning (exit 130), a
# child's end and SIGKILL/SIGSTOP cannot be caught.
UNCATCHABLE = ("SIGINT", "SIGKILL", "SIGSTOP", "SIGCHLD")


def signal_number(name: str) -> signal.Signals:
    """`SIGTERM`, `TERM` or `term` as a signal; a ValueError naming the choices otherwise."""
    full = name.upper() if name.upper().startswith("SIG") else f"SIG{name.upper()}"
    if full in UNCATCHABLE or full not in signal.Signals.__members__:
        raise ValueError(full)
    return signal.Signals[full]


def check_nccl(backend: str, is_cuda: bool, device: str) -> None:
    """The one refusal of fl.backend=nccl without CUDA; `device` says which device, in words."""
    require(
        backend != "nccl" or is_cuda,
        f"fl.backend=nccl needs CUDA and {device}; use fl.backend=gloo (or auto)",
    )


# fl.client_state: see fedlight.store.client_states
CLIENT_STATE_STORES = ("auto", "memory", "disk")
ENGINE_CHOICES = ("auto", "sequential", "vectorized")  # fl.engine; see fedlight.engines
MEMORY_FORMATS = ("auto", "channels_last", "contiguous")  # fl.memory_format (core/layout.py)
BACKENDS = ("auto", "gloo", "nccl")  # fl.backend: torch.distributed backend of fl.workers > 1
# fl.exchange: what workers exchange per round (see fedlight.drivers.synchronous)
EXCHANGES = ("uploads", "sums")
# fl.threads_per_worker's ceiling: torch's thread pools crash at 10^6 threads; more than the
# CPUs is allowed, with a warning (fedlight.runs.experiment), since the thread count changes float
# results and reproducing a number may need the threads of a larger machine.
MAX_THREADS = 1024
# fl.on_divergence: what a run does when its loss or weights become nan or inf (see
# fedlight.drivers.synchronous)
ON_DIVERGENCE = ("stop", "continue")


@dataclass
class FLSettings:
    num_clients: int = 100
    clients_per_round: int = 10
    rounds: int = 50
    client_state: str = "auto"
    client_state_memory_mb: float = 256.0  # auto: RAM while num_clients such states fit in it
    engine: str = "auto"  # how clients train locally: see fedlight.engines
    # The layout the client module trains and evaluates in (fedlight.core.layout): auto
    # (channels_last for a model with 2-D convolutions on the CPU whose steps run in it),
    # channels_last or contiguous.
    memory_format: str = "auto"
    # Processes that share each round's clients (see fedlight.drivers.workers): on this machine, or
    # under torchrun the world size the environment gives.
    workers: int = 1
    threads_per_worker: int | None = None  # None: the process's torch threads // local workers
    backend: str = "auto"  # auto: nccl on CUDA, gloo otherwise
    exchange: str = "uploads"  # uploads: bit-identical to 1 worker; sums: one model per worker
    # Blocks of at least this many MB get their own memory mapping, returned to the system when
    # freed (fedlight.core.allocator); None: the C library's own, rising threshold.
    mmap_threshold_mb: float | None = 8.0
    on_divergence: str = "stop"  # stop: exit at the first non-finite round; continue: go on
    # Seconds a worker waits for the others at an exchange before it ends the run naming them
    # (a stopped or hung worker); torch's own default timeout of a gloo collective.
    worker_timeout: float = 1800.0

    def __post_init__(self) -> None:
        require(self.num_clients >= 1, f"fl.num_clients={self.num_clients} must be >= 1")
        require(
            1 <= self.clients_per_round <= self.num_clients,
            f"fl.clients_per_round={self.clients_per_round} must be between 1 and "
            f"fl.num_clients={self.num_clients}; lower it or raise fl.num_clients",
        )
        require(self.rounds >= 1, f"fl.rounds={self.rounds} must be >= 1")
        require(
            self.client_state in CLIENT_STATE_STORES,
            f"fl.client_state={self.client_state} is not a store; use auto (RAM while all clients' "
            "states fit in fl.client_state_memory_mb, else disk), memory (states in RAM) or disk "
            "(one file per client under <run dir>/client_states/, for many clients)",
        )
        require(
            self.client_state_memory_mb >= 0,
            f"fl.client_state_memory_mb={self.client_state_memory_mb} must be >= 0 (0: every "
            "state on disk under fl.client_state=auto)",
        )
        require(
            self.engine in ENGINE_CHOICES,
            f"fl.engine={self.engine} is not an engine; use {', '.join(ENGINE_CHOICES)}",
        )
        require(
            self.memory_format in MEMORY_FORMATS,
            f"fl.memory_format={self.memory_format} is not a layout; use auto (channels_last for "
            "a model with 2-D convolutions on the CPU), channels_last or contiguous (the numbers "
            "of fedlight before channels_last became the default)",
        )
        self.check_workers()
        require(
            self.mmap_threshold_mb is None or 0 < self.mmap_threshold_mb <= MAX_THRESHOLD_MB,
            f"fl.mmap_threshold_mb={self.mmap_threshold_mb} must be in (0, {MAX_THRESHOLD_MB}] "
            "(glibc's limit), or null to leave the C library's threshold as it is",
        )
        require(
            self.on_divergence in ON_DIVERGENCE,
            f"fl.on_divergence={self.on_divergence} is not a choice; use stop (end the run at the "
            "first round whose loss or weights are not finite) or continue (studies of divergence)",
        )

    def check_workers(self) -> None:
        """The settings of several workers (`fedlight.drivers.workers`)."""
        require(
            self.workers >= 1,
            f"fl.workers={self.workers} must be >= 1 (processes that share a round's clients)",
        )
        require(
            self.workers <= self.clients_per_round,
            f"fl.workers={self.workers} exceeds fl.clients_per_round={self.clients_per_round}: "
            "some workers would never train; lower fl.workers",
        )
        require(
            self.threads_per_worker is None or self.threads_per_worker >= 1,
            f"fl.threads_per_worker={self.threads_per_worker} must be >= 1 (or null: the "
            "process's torch threads divided among the workers)",
        )
        require(
            self.threads_per_worker is None or self.threads_per_worker <= MAX_THREADS,
            f"fl.threads_per_worker={self.threads_per_worker} must be <= {MAX_THREADS} (torch "
            "crashes at 10^6 threads); more than the CPUs only slows a run down",
        )
        require(
            self.backend in BACKENDS,
            f"fl.backend={self.backend} is not a backend; use auto (nccl on CUDA, else gloo), "
            "gloo or nccl",
        )
        require(
            self.exchange in EXCHANGES,
            f"fl.exchange={self.exchange} is not an exchange; use uploads (every encoded upload "
            "crosses, numbers of 1 worker bit for bit) or sums (one partial sum per worker)",
        )
        require(
            self.worker_timeout > 0,
            f"fl.worker_timeout={self.worker_timeout} must be > 0 (seconds a worker waits for "
            "the others at an exchange)",
        )


# local.gradient_clip_algorithm: Lightning's Trainer(gradient_clip_algorithm=...); null is "norm"
CLIP_ALGORITHMS = ("norm", "value")


@dataclass
class LocalSettings:
    epochs: int = 1
    # B; null is McMahan et al.'s B = ∞: each client's examples as one batch, one step an epoch
    batch_size: int | None = 10
    # A Lightning Trainer's gradient clipping, applied at every local step after the algorithm's
    # gradient corrections (see fedlight.engines.lightning): null or 0 is off.
    gradient_clip_val: float | None = None
    gradient_clip_algorithm: str | None = None  # norm (total L2 norm; null) or value (per entry)

    def __post_init__(self) -> None:
        require(self.epochs >= 1, f"local.epochs={self.epochs} must be >= 1")
        require(
            self.batch_size is None or self.batch_size >= 1,
            f"local.batch_size={self.batch_size} must be >= 1 (null: each client's examples as "
            "one batch, B = ∞)",
        )
        require(
            self.gradient_clip_val is None or self.gradient_clip_val >= 0,
            f"local.gradient_clip_val={self.gradient_clip_val} must be >= 0 (null or 0: off)",
        )
        require(
            self.gradient_clip_algorithm is None or self.gradient_clip_algorithm in CLIP_ALGORITHMS,
            f"local.gradient_clip_algorithm={self.gradient_clip_algorithm} is not an algorithm; "
            "use norm (the gradients' total L2 norm, the default) or value (each entry)",
        )


@dataclass
class OptimSettings:
    lr: float = 0.05
    momentum: float = 0.0
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        require(self.lr > 0, f"optim.lr={self.lr} must be > 0")
        require(0 <= self.momentum < 1, f"optim.momentum={self.momentum} must be in [0, 1)")
        require(self.weight_decay >= 0, f"optim.weight_decay={self.weight_decay} must be >= 0")


# eval.split: the split whose accuracy picks best_accuracy, the target and rounds_to_target
SPLITS = ("test", "validation")
# eval.test: the rounds the test set is evaluated in (every evaluated round, or the last alone)
TEST_MODES = ("every_round", "final")


@dataclass
class EvalSettings:
    every: int = 1
    target_accuracy: float | None = None
    # End the run at the first evaluated round reaching target_accuracy (on eval.split): how
    # rounds-to-target tables are measured (McMahan et al. 2017, Table 1), without the rounds after
    stop_at_target: bool = False
    batch_size: int = 1000
    finetune_epochs: int = 0  # local epochs on a client's model before its local evaluation
    every_seconds: float | None = None  # evaluate each time the virtual clock passes a multiple
    # The split whose numbers decide best_accuracy, eval.target_accuracy's round and a collapse:
    # validation (data.validation_fraction) keeps the test set out of every choice, as model
    # selection should (NIID-Bench: Li et al. 2022 ICDE; FedOpt: Reddi et al. 2021 ICLR).
    split: str = "test"
    test: str = "every_round"  # every_round | final: the test set in the last round's row alone
    # Each client's model (the global one, or its own for local, FedPer, Ditto) on the global test
    # examples of the labels its training part holds: local_accuracy_own_labels_{mean,p10,std}.
    # How a personalized or local model is judged where it is used without shrinking its
    # training data (partition.client_test_fraction does that); the SCAFFOLD tutorial's Local row.
    own_labels: bool = False
    # The global model's loss and accuracy on every client's training examples (global_train_loss,
    # global_train_accuracy): the training loss FedProx's figures plot (Li et al., MLSys 2020).
    train_loss: bool = False

    def __post_init__(self) -> None:
        require(
            self.split in SPLITS,
            f"eval.split={self.split} is not a split; use test or validation (with "
            "data.validation_fraction > 0)",
        )
        require(
            self.test in TEST_MODES,
            f"eval.test={self.test} is not a choice; use every_round (the test set in every "
            "evaluated round) or final (in the last round alone, with eval.split=validation)",
        )
        require(self.every >= 1, f"eval.every={self.every} must be >= 1")
        require(
            self.every_seconds is None or self.every_seconds > 0,
            f"eval.every_seconds={self.every_seconds} must be > 0 (null: every eval.every rounds)",
        )
        require(
            self.finetune_epochs >= 0,
            f"eval.finetune_epochs={self.finetune_epochs} must be >= 0 (0: no fine-tuning)",
        )
        require(
            self.target_accuracy is None or 0 < self.target_accuracy <= 1,
            f"eval.target_accuracy={self.target_accuracy} must be a fraction in (0, 1], e.g. 0.8",
        )
        require(self.batch_size >= 1, f"eval.batch_size={self.batch_size} must be >= 1")
        require(
            not self.stop_at_target or self.target_accuracy is not None,
            "eval.stop_at_target=true needs eval.target_accuracy (the accuracy that ends the run)",
        )
        require(
            not self.stop_at_target or self.test == "every_round",
            "eval.stop_at_target=true tests the round that reaches the target: use "
            "eval.test=every_round",
        )


@dataclass
class DataSettings:
    """What a run does to any data source's examples after `load()`: every source, a user's
    own included, gets it without a field of its own."""

    # The share of the training examples held out as the server's validation set, per label,
    # before the partition (0: none; NIID-Bench: Li et al. 2022 ICDE; FedOpt: Reddi et al. 2021
    # ICLR): numbers to choose hyperparameters, rounds and models by without the test set.
    validation_fraction: float = 0.0

    def __post_init__(self) -> None:
        require(
            0 <= self.validation_fraction < 1,
            f"data.validation_fraction={self.validation_fraction} must lie in [0, 1); use e.g. "
            "0.1, or 0 for no validation set",
        )


@dataclass
class CheckpointSettings:
    every: int = 10

    def __post_init__(self) -> None:
        require(self.every >= 1, f"checkpoint.every={self.every} must be >= 1")


# console.progress: how a run shows its rounds on the console (see fedlight.loggers.console)
PROGRESS_MODES = ("auto", "bar", "lines", "off")


@dataclass
class ConsoleSettings:
    # auto: a live bar on a terminal, one line per round otherwise, nothing where the job's
    # logging is quiet (hydra/job_logging=disabled); bar, lines, off: that, wherever it prints
    progress: str = "auto"

    def __post_init__(self) -> None:
        require(
            self.progress in PROGRESS_MODES,
            f"console.progress={self.progress} is not a display; use auto (a bar on a terminal, "
            "else one line per round; off under hydra/job_logging=disabled), bar, lines or off",
        )


@dataclass
class PreemptionSettings:
    """What a run does on a preemption notice (`fedlight.drivers.preemption`)."""

    signals: list[str] = field(default_factory=lambda: ["SIGTERM", "SIGUSR1", "SIGUSR2"])
    requeue: bool = True  # under SLURM with no launcher handler of its own: scontrol requeue

    def __post_init__(self) -> None:
        for name in self.signals:
            try:
                signal_number(str(name))
            except ValueError:
                raise ConfigError(
                    f"preemption.signals names {name}, which a run cannot take as a preemption "
                    "notice; give catchable signals such as [SIGTERM,SIGUSR1,SIGUSR2], or [] to "
                    "leave signals alone"
                ) from None


@dataclass
class RunSettings:
    """Everything about a run that is a plain value rather than a pluggable component."""

    seed: int = 0
    fl: FLSettings = field(default_factory=FLSettings)
    local: LocalSettings = field(default_factory=LocalSettings)
    optim: OptimSettings = field(default_factory=OptimSettings)
    eval: EvalSettings = field(default_factory=EvalSettings)
    data: DataSettings = field(default_factory=DataSettings)  # the data group's run settings
    checkpoint: CheckpointSettings = field(default_factory=CheckpointSettings)
    console: ConsoleSettings = field(default_factory=ConsoleSettings)
    preemption: PreemptionSettings = field(default_factory=PreemptionSettings)
    device: str = "auto"
    resume: str | None = None
    overwrite: bool = False  # replace the results of another run in the run directory
    # the summary.json number, or metrics.csv column (its last value), returned to Hydra's
    # sweeper; a column is checked at the first evaluated round (`fedlight.runs.objective`)
    objective: str = "final_accuracy"

    def __post_init__(self) -> None:
        require(
            re.fullmatch(r"[\w./-]+", self.objective) is not None,
            f"objective={self.objective!r} cannot name a number; choose a summary.json number "
            f"({', '.join(OBJECTIVES)}) or a metrics.csv column",
        )
        require(self.seed >= 0, f"seed={self.seed} must be >= 0")
        check_device_name(self.device)
        check_nccl(
            self.fl.backend, self.device.split(":")[0] in {"auto", "cuda"}, f"device={self.device}"
        )
        require(
            self.fl.workers == 1 or ":" not in self.device,
            f"device={self.device} names one GPU but fl.workers={self.fl.workers}; use "
            "device=cuda (worker r then takes cuda:<its local rank>)",
        )
        check_device_available(self.device)

    def check_splits(self, own_validation: bool) -> None:
        """What the validation split's settings need of each other, `own_validation`: whether
        the data source brings a validation set (a DataModule's `val_dataloader`); checked
        where the source is known (`fedlight.cli.job.build_job`)."""
        validated = self.data.validation_fraction > 0 or own_validation
        require(
            self.eval.split == "test" or validated,
            "eval.split=validation needs a validation set; set data.validation_fraction, e.g. "
            "0.1, or give a DataModule with val_dataloader (or eval.split=test)",
        )
        require(
            self.eval.test == "every_round" or self.eval.split == "validation",
            "eval.test=final leaves eval.split=test only the last round to pick from; set "
            "eval.split=validation (with data.validation_fraction, e.g. 0.1) or "
            "eval.test=every_round",
        )
        require(
            self.objective != "val_accuracy" or validated,
            "objective=val_accuracy needs a validation set; set data.validation_fraction, e.g. "
            "0.1 (or objective=best_accuracy with eval.split=validation)",
        )


def check_device_name(device: str) -> None:
    """`device` names a device fedlight runs on (checked before anything asks torch about it)."""
    require(
        re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", device) is not None,
        f"device={device} is not a torch device; use auto, cpu, cuda or cuda:N",
    )


def check_device_available(device: str) -> None:
    """`device=cuda[:N]` or `mps` is refused before any work where torch cannot reach it (torch
    imported here: the settings are read by `--help` and tab completion, which must not wait
    for it)."""
    import torch

    kind, _, index = device.partition(":")
    if kind == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        require(count > 0, f"device={device} but torch sees no CUDA GPU; use device=cpu or auto")
        require(
            not index or int(index) < count,
            f"device={device} but this machine has {count} CUDA GPU(s) (cuda:0 to "
            f"cuda:{count - 1}); pick one of those, or device=cuda",
        )
    if kind == "mps":
        require(
            torch.backends.mps.is_available(),
            f"device={device} but torch has no MPS (Apple GPU) here; use device=cpu or auto",
        )
