"""The finite check before aggregation (`all_finite`): a NaN or Inf entry rejects an upload, and
finite entries never do, also where their sum overflows (the check's fast path is a sum per
tensor, which is not finite for such an update too, so it must fall back to the entries)."""

import pytest
import torch

from fedlight.aggregation.base import all_finite

BIG = torch.finfo(torch.float32).max / 2  # finite; two of them sum to Inf in float32


def upload(*update: torch.Tensor) -> dict[str, dict[str, torch.Tensor]]:
    """An upload's parts: `update` as the model delta, an integer buffer beside it."""
    return {
        "update": {f"w{i}": t for i, t in enumerate(update)},
        "buffers": {"num_batches_tracked": torch.tensor(3)},
    }


def test_a_finite_update_passes() -> None:
    assert all_finite(upload(torch.randn(50, 40), torch.zeros(7)))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_one_nan_or_inf_entry_rejects_the_upload(bad: float) -> None:
    update = torch.randn(1000)
    update[417] = bad
    assert not all_finite(upload(torch.randn(3, 3), update))


def test_inf_and_minus_inf_in_one_tensor_reject_it() -> None:
    """Their sum is NaN, not Inf: still not finite."""
    assert not all_finite(upload(torch.tensor([float("inf"), 1.0, float("-inf")])))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_finite_entries_whose_sum_overflows_pass(dtype: torch.dtype) -> None:
    big = torch.full((64,), torch.finfo(dtype).max / 2, dtype=dtype)
    assert not big.sum().isfinite()  # the fast path cannot decide: the entries are checked
    assert all_finite(upload(torch.randn(5).to(dtype), big))


def test_an_overflowing_tensor_with_a_nan_entry_is_still_rejected() -> None:
    update = torch.full((10,), BIG)
    update[3] = float("nan")
    assert not all_finite(upload(update))


def test_integer_tensors_and_empty_uploads_are_not_checked() -> None:
    assert all_finite({})
    assert all_finite({"update": {}, "buffers": {"steps": torch.tensor(2**62)}})
