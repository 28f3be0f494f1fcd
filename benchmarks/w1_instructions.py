"""W1 by instruction count: fedlight's W1 job (mlp) alone, for N rounds, from a given source tree.

Run under callgrind, which counts instructions rather than seconds, so that two commits can be
compared on a machine whose timings are too noisy to settle a few percent. The work of R2 - R1
rounds is the difference of two whole-process counts (start-up, data loading and the one final
evaluation cancel out, as `eval.every` and `checkpoint.every` equal the rounds):

    PYTHONHASHSEED=0 OMP_NUM_THREADS=1 valgrind --tool=callgrind --callgrind-out-file=/tmp/r1.cg \
        python benchmarks/w1_instructions.py <checkout> 1 --data-root data
    (the same with 3 rounds; then compare "Collected" of R = 3 minus R = 1 between checkouts)
"""

import sys
from pathlib import Path

src, rounds = Path(sys.argv[1]), int(sys.argv[2])
data_root = sys.argv[sys.argv.index("--data-root") + 1] if "--data-root" in sys.argv else "data"
sys.path.insert(0, str(src / "benchmarks"))
sys.path.insert(0, str(src))
import torch  # noqa: E402

torch.set_num_threads(1)
import w1  # noqa: E402

import fedlight.cli.schema  # noqa: E402
from fedlight.data.mnist import MNIST  # noqa: E402

fedlight.cli.schema.register_schema()
data = MNIST(root=data_root, download=False).load()
r = w1.run_fedlight("mlp", data, rounds)
print(src, rounds, r.accuracy, r.seconds, flush=True)
