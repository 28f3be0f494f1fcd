"""What a checkpoint must hold for its run to continue, checked before it is restored: a
checkpoint another fedlight wrote, or one edited by hand, is refused in one line naming it and
what differs, never a traceback from deep in the restore nor a resume that silently drops its
rounds (the checkpoint is read weights-only: these are its contents, not code).
"""

from typing import Any

import torch

from fedlight.core.errors import ConfigError
from fedlight.core.tensors import StateDict
from fedlight.drivers.history import STATE_FORMAT
from fedlight.store.run_files import CHECKPOINT_NAME

RESTART = "start the run again without resume="


def check_state(state: dict[str, Any], resume: str) -> None:
    """The checkpoint's format, random state and rows, before any data is loaded: a format this
    fedlight cannot read, a generator state of another size, or rows that are not those of its
    completed rounds (they would be lost from metrics.csv) are refused."""
    where = f"resume={resume}: its {CHECKPOINT_NAME}"
    written = state["state_format"]
    if not isinstance(written, int) or not 1 <= written <= STATE_FORMAT:
        raise ConfigError(
            f"{where} has state format {written!r}, which this fedlight (formats 1 to "
            f"{STATE_FORMAT}) cannot read; resume it with the fedlight that wrote it, or {RESTART}"
        )
    generator, expected = state["torch_rng"], torch.get_rng_state()
    if not (
        isinstance(generator, torch.Tensor)
        and generator.dtype == expected.dtype
        and generator.shape == expected.shape
    ):
        raise ConfigError(
            f"{where} holds no random state of torch's ({described(generator)}, expected "
            f"{expected.numel()} bytes): the run cannot continue as it ran; {RESTART}"
        )
    rows, completed = state["rows"], state["completed_rounds"]
    last = rows[-1].get("round") if isinstance(rows, list) and rows else None
    if written >= 3 and isinstance(completed, int) and completed > 0 and last != completed:
        raise ConfigError(
            f"{where} says {completed} rounds were completed but its rows end at round {last}: "
            f"metrics.csv would lose those rounds; restore the checkpoint, or {RESTART}"
        )


def check_server_weights(state: dict[str, Any], expected: StateDict, resume: str) -> None:
    """The checkpoint's server weights are this model's (the same names, shapes and dtypes as
    `expected`, the model's initial ones) and finite, unless the run had diverged and went on
    (`fl.on_divergence=continue`): a module edited since the run started, or a weight edited in
    the file, is refused in one line."""
    where = f"resume={resume}: its {CHECKPOINT_NAME}"
    weights = state["server_weights"]
    if not isinstance(weights, dict):
        raise ConfigError(f"{where} holds no server weights ({described(weights)}); {RESTART}")
    fix = "resume with the model the run was started with, or " + RESTART
    for name in sorted(set(expected) | set(weights)):
        found, wanted = weights.get(name), expected.get(name)
        if wanted is None or found is None:
            what = "not in the model" if wanted is None else "missing"
            raise ConfigError(f"{where}: server weight {name} is {what}; {fix}")
        if not isinstance(found, torch.Tensor) or (found.shape, found.dtype) != (
            wanted.shape,
            wanted.dtype,
        ):
            raise ConfigError(
                f"{where}: server weight {name} is {described(found)}, the model's is "
                f"{described(wanted)}; {fix}"
            )
        finite = not found.is_floating_point() or bool(torch.isfinite(found).all())
        if not finite and state.get("diverged_at_round") is None:
            raise ConfigError(
                f"{where}: server weight {name} is not finite, and the run had not diverged: "
                f"the file was damaged; {RESTART}"
            )


def described(value: Any) -> str:
    """A checkpoint entry in a few words: a tensor's shape and dtype, else its type."""
    if isinstance(value, torch.Tensor):
        return f"{tuple(value.shape)} {str(value.dtype).removeprefix('torch.')}"
    return type(value).__name__
