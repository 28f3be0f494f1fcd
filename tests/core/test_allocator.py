"""`fl.mmap_threshold_mb`: blocks of at least that size leave the process when freed.

What must hold: with glibc's own (rising) threshold a freed block that was allocated among blocks
that live on stays in the process's memory; with the fixed threshold it is returned; a setting
outside glibc's range is refused in one line. Each case runs in a new interpreter: the threshold
is the whole process's, for good.
"""

import platform
import subprocess
import sys

import pytest

from fedlight.core.errors import ConfigError
from fedlight.core.settings import FLSettings
from tests.conftest import REPO

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"

# 20 large blocks (argv[2] MB), each followed by one of 256 kB that lives on (as a round's
# uploads among the other tensors; too large for the holes that imports leave in the heap, so it
# follows the large one wherever that is), after one large block was freed (which raises glibc's
# own threshold to its size); then the large ones are freed, and with argv[3] == "release" the
# round's end releases what was freed. Printed: whether the threshold was set, and the private
# memory (MB) the process still holds over what it held before.
RETAINED = """
import sys
from pathlib import Path
import torch
from fedlight.core.allocator import fix_mmap_threshold, release_freed

def private_mb():
    rows = Path("/proc/self/smaps_rollup").read_text().splitlines()[1:]
    return {r.split(":")[0]: int(r.split()[1]) for r in rows}["Private_Dirty"] / 1024

setting = None if sys.argv[1] == "null" else float(sys.argv[1])
taken = fix_mmap_threshold(setting)
elements = int(float(sys.argv[2]) * 2**18)
torch.ones(elements).sum()  # allocated and freed at once
before = private_mb()
large, small = [], []
for _ in range(20):
    large.append(torch.ones(elements))
    small.append(torch.ones(2**16))
large.clear()
if sys.argv[3] == "release":
    release_freed(setting)
print(taken, round(private_mb() - before))
"""


def retained(setting: str, block_mb: float = 9, at_the_end: str = "-") -> tuple[bool, int]:
    done = subprocess.run(
        [sys.executable, "-c", RETAINED, setting, str(block_mb), at_the_end],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    taken, megabytes = done.stdout.split()
    return taken == "True", int(megabytes)


@pytest.mark.skipif(not GLIBC, reason="glibc's mallopt")
def test_freed_large_blocks_leave_the_process_with_the_fixed_threshold() -> None:
    taken, kept = retained("8")
    assert taken
    assert kept < 20  # 5 MB of small blocks live on; the 180 MB of large ones went back
    untouched, kept_by_default = retained("null")
    assert not untouched
    assert kept_by_default > 150  # glibc's rising threshold put them in the heap: still held


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc_trim")
def test_blocks_below_the_threshold_leave_the_process_at_the_end_of_a_round() -> None:
    assert retained("8", block_mb=4)[1] > 60  # 80 MB of 4 MB blocks freed inside the heap
    assert retained("8", block_mb=4, at_the_end="release")[1] < 20
    assert retained("null", block_mb=4, at_the_end="release")[1] > 60  # null: left as it is


@pytest.mark.parametrize("setting", [0, -1, 33])
def test_a_threshold_outside_glibcs_range_is_refused_in_one_line(setting: float) -> None:
    with pytest.raises(ConfigError, match=rf"fl.mmap_threshold_mb={setting} must be in \(0, 32\]"):
        FLSettings(mmap_threshold_mb=setting)
