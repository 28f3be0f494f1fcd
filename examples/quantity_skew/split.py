"""Quantity skew, a client split of one's own for `partition=callable` (docs/howto/add-dataset.md):
NIID-Bench's "iid-diff-quantity" (Li et al., "Federated Learning on Non-IID Data Silos: An
Experimental Study", ICDE 2022), where clients hold different amounts of data with the same
label distribution.

Client shares q ~ Dir(β·1) of the shuffled training set; β = 0.5 as in the paper's experiments.
NIID-Bench draws q again until every client holds at least 10 examples; here a client may hold
none, and fedlight leaves such clients out of the rounds that select them.
"""

import numpy as np

BETA = 0.5


def quantity_skew(
    labels: np.ndarray, num_clients: int, generator: np.random.Generator
) -> list[np.ndarray]:
    """One index array per client; only `generator` (seed, PARTITION) is drawn from, so the split
    is the same for the same seed."""
    shares = generator.dirichlet(np.full(num_clients, BETA))
    cuts = (np.cumsum(shares)[:-1] * len(labels)).astype(int)
    return np.split(generator.permutation(len(labels)), cuts)
