"""The per-client `update_norm` the trackers show: ‖weights − start‖₂ over the floating tensors
both hold, accumulated in float64 (fedlight.loggers.clients)."""

import math

import torch

from fedlight.loggers.clients import CHUNK, update_norm

U32 = 2.0**-24  # float32's unit roundoff: the one rounding of each difference w − s
U64 = 2.0**-53  # float64's: each square, each addition of the sums, the square roots


def test_update_norm_is_the_float64_norm_of_the_difference_within_its_roundings() -> None:
    """Against the norm of the exact differences (formed in float64, exact here: w and s are
    float32 of nearby magnitudes), summed with `math.fsum` (correctly rounded).

    Each float32 difference is w − s times (1 + δ), |δ| ≤ u32, so its norm is within u32 of the
    exact one; a float64 sum of N nonnegative squares in any order is within (N + 1)·u64 of
    theirs; each of the c pieces' norms is a square root squared again (3·u64 more each), their
    sum within (c + 1)·u64 more, and the last square root halves relative errors. A float32
    accumulation over these N = 120,000 entries would be off by orders of magnitude more than
    u32. fc.weight's 118,600 entries span two pieces, so pieces are summed too."""
    generator = torch.Generator().manual_seed(0)
    shapes = {"conv.weight": (32, 3, 3, 3), "conv.bias": (32,), "fc.weight": (100, 1186)}
    start = {name: torch.randn(shape, generator=generator) for name, shape in shapes.items()}
    weights = {
        name: s + 1e-3 * torch.randn(s.shape, generator=generator) for name, s in start.items()
    }
    start["num_batches_tracked"] = torch.tensor(5)  # not floating: left out
    weights["num_batches_tracked"] = torch.tensor(9)
    start["not_trained"] = torch.ones(4)  # not in the trained weights: left out
    exact = [
        w - s
        for name in shapes
        for w, s in zip(
            weights[name].flatten().tolist(), start[name].flatten().tolist(), strict=True
        )
    ]
    reference = math.sqrt(math.fsum(d * d for d in exact))
    n = len(exact)
    c = sum(math.ceil(math.prod(shape) / CHUNK) for shape in shapes.values())
    assert c == 4
    bound = (U32 + (n + 4 * c + 3) * U64) * reference
    assert abs(update_norm(weights, start) - reference) <= bound


def test_update_norm_of_unmoved_weights_is_zero() -> None:
    start = {"w": torch.randn(10), "b": torch.randn(3)}
    assert update_norm({name: t.clone() for name, t in start.items()}, start) == 0.0
    assert update_norm({}, {"steps": torch.tensor(1)}) == 0.0
