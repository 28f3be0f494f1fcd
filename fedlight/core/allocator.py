"""Where freed tensor memory goes (`fl.mmap_threshold_mb`): back to the system, not into the heap.

Torch allocates a CPU tensor with the C library's `malloc`. glibc serves a block below its mmap
threshold from the heap and a larger one from a memory mapping of its own, which `free` hands back
to the system at once; the threshold starts at 128 kB and, by default, rises to the size of every
mapped block freed (up to 32 MB), so after a round's first large blocks are freed the later ones
(the gather's buffers, evaluation batches, uploads) come from the heap, interleaved with smaller
blocks that outlive them: the heap keeps their pages after they are freed. On the headline command
(`algo=scaffold data=cifar10`, two workers) each worker held about 230 MB of private memory at the
end of a round with 21 MB of live tensors.

So (1) a fixed threshold (`mallopt(M_MMAP_THRESHOLD)`, which also stops it rising) gives every
block of at least `fl.mmap_threshold_mb` its own mapping, and the heap is trimmed above twice that
much free space at its top (glibc's own ratio); 8 MB keeps a step's parameter-sized tensors of the
built-in models in the heap (cifar_cnn's largest is 4.2 MB: a 4 MB threshold maps and faults them
in again every step, which made that run about a third slower); (2) after every round the free
pages inside the heap go back too (`malloc_trim`), so that rounds do not add up. The headline
run's peak of summed PSS: docs/speed-and-memory.md. Where the memory comes from changes no number.
glibc only: elsewhere (macOS, musl) nothing is set.
"""

import ctypes
import ctypes.util
import platform
import sys
from functools import cache
from typing import Any

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MAX_THRESHOLD_MB = 32  # glibc refuses a larger mmap threshold on 64-bit systems


@cache
def c_library() -> Any:
    """glibc's functions, or None where this is not glibc (macOS, musl: nothing is set)."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c"))
    except OSError:
        return None


def fix_mmap_threshold(threshold_mb: float | None) -> bool:
    """Blocks of at least `threshold_mb` MB mapped on their own from now on in this process (and
    the processes it forks); None leaves the allocator as it is. True where glibc took it."""
    libc = c_library()
    if threshold_mb is None or libc is None:
        return False
    threshold = int(threshold_mb * 2**20)
    return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold)) and bool(
        libc.mallopt(M_TRIM_THRESHOLD, 2 * threshold)
    )


def release_freed(threshold_mb: float | None) -> None:
    """The heap's free pages back to the system, at the end of a round (not with None: the
    allocator is left as it is)."""
    libc = c_library()
    if threshold_mb is not None and libc is not None:
        libc.malloc_trim(0)
