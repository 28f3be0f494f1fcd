"""Every random draw in a run comes from a generator derived from (seed, stream, round, client).

Deriving instead of sharing one global generator is what makes runs reproducible independently of
the order in which clients are trained, and lets a resumed run draw exactly what the uninterrupted
run would have drawn without saving generator states.
"""

from enum import IntEnum

import numpy as np
import torch


class Stream(IntEnum):
    """Independent purposes of randomness; each gets its own derived generator."""

    MODEL_INIT = 0
    PARTITION = 1
    SELECTION = 2
    LOCAL_TRAINING = 3
    POOLING = 4
    WIRE = 5  # randomness of wire transforms (stochastic rounding, random sparsification)
    ATTACK = 6  # which clients are malicious (round 0), and their random forgeries
    PRIVACY = 7  # differential privacy's noise (the server's per round, DP-SGD's per client)
    LOCAL_TEST = 8  # which of a client's examples are held out as its local test set
    FINE_TUNING = 9  # the batches of evaluation-time fine-tuning (eval.finetune_epochs)
    PERSONAL_TRAINING = 10  # the batches of a client's second, personal training (Ditto)
    SYSTEM = 11  # client speeds (round 0) and which selected clients fail (per round, client)
    SECURE_AGGREGATION = 12  # pairwise and self masks (per round, client or pair of clients)
    VALIDATION = 13  # which training examples are held out as the server's validation set
    LOCAL_VALIDATION = 14  # which of a client's examples are held out as its validation part
    LOCAL_WORK = 15  # a participant's local epochs (per round, client: `local_work`)
    STRAGGLERS = 16  # which of a round's selected clients straggle (per round)
    DATA = 17  # data a source generates or deals out (data=synthetic, data=fedprox_mnist)


def derive_seed(seed: int, stream: Stream, round_index: int = 0, client: int = 0) -> int:
    """A 63-bit seed that depends on all four coordinates and is stable across platforms."""
    words = np.random.SeedSequence([seed, int(stream), round_index, client]).generate_state(2)
    return int((int(words[0]) << 31) ^ int(words[1]))


def numpy_generator(
    seed: int, stream: Stream, round_index: int = 0, client: int = 0
) -> np.random.Generator:
    return np.random.default_rng(derive_seed(seed, stream, round_index, client))


def accelerator_started() -> bool:
    """Whether an accelerator whose generators `torch.manual_seed` seeds lazily has started."""
    return torch.cuda.is_initialized() or torch.xpu.is_initialized() or torch.mtia.is_initialized()


def seed_torch(seed: int) -> None:
    """`torch.manual_seed(seed)` for the global generators a module's own randomness draws from
    (dropout), at a client's cost: for each accelerator not started (CUDA, XPU, MTIA), torch queues
    the seed with a captured stack trace, 0.1-1 ms a call (per client per round: a step's time on
    a small model). An accelerator that has not started holds none of the run's tensors, so then
    the CPU's generator is the one to seed; once one has started, torch's own call seeds them all.
    """
    if accelerator_started():
        torch.manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)
