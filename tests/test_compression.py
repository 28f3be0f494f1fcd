"""Sparsifying compressors (`compression=topk`, `randk`): what they keep, the exact bytes they
send, error feedback's bookkeeping, unbiasedness of random-k, and runs that resume bit-exactly
with the residuals in the disk client store."""

import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from fedlight.compression.randk import RandK
from fedlight.compression.topk import TopK, index_dtype
from fedlight.context import Federation
from fedlight.experiment import Job, run_job
from fedlight.tensors import StateDict, nbytes

from .conftest import TINY, rows_without_timings, run_killed_in_round
from .test_pipeline import read_rows

FEDERATION = Federation(num_clients=10, trainable=frozenset({"w", "v"}), seed=5)


def serialized_length(payload: StateDict) -> int:
    """The bytes of the payload's tensors laid end to end, as they would be sent."""
    return len(b"".join(t.contiguous().numpy().tobytes() for t in payload.values()))


def update(scale: float = 1.0) -> StateDict:
    generator = torch.Generator().manual_seed(int(scale * 100))
    return {
        "w": torch.randn(40, 30, generator=generator) * scale,
        "v": torch.randn(7, generator=generator) * scale,
        "steps": torch.tensor(3),  # not a float32 tensor: travels as it is
    }


@pytest.mark.parametrize("scope", ["tensor", "update"])
def test_top_k_keeps_the_largest_entries_and_ratio_one_is_lossless(scope: str) -> None:
    ctx = FEDERATION.round(1)
    tensors = update()
    exact, _ = TopK(ratio=1.0, scope=scope).decode(
        ctx, 0, TopK(ratio=1.0, scope=scope).encode(ctx, 0, tensors, None)[0], None
    )
    assert all(torch.equal(exact[n], tensors[n]) for n in tensors)
    assert list(exact) == list(tensors)

    top = TopK(ratio=0.1, scope=scope, error_feedback=False)
    decoded, _ = top.decode(ctx, 0, top.encode(ctx, 0, tensors, None)[0], None)
    if scope == "tensor":
        for name in ("w", "v"):
            k = math.ceil(0.1 * tensors[name].numel())
            kept = decoded[name] != 0
            assert int(kept.sum()) == k
            threshold = tensors[name].abs().flatten().topk(k).values[-1]
            assert torch.equal(decoded[name][kept], tensors[name][kept])
            assert bool((tensors[name].abs()[kept] >= threshold).all())
    else:
        flat = torch.cat([tensors["w"].flatten(), tensors["v"]])
        k = math.ceil(0.1 * flat.numel())
        threshold = flat.abs().topk(k).values[-1]
        both = torch.cat([decoded["w"].flatten(), decoded["v"]])
        assert int((both != 0).sum()) == k and bool((flat.abs()[both != 0] >= threshold).all())
    assert torch.equal(decoded["steps"], tensors["steps"])


def test_positions_travel_in_the_narrowest_type_or_as_a_bitmap_and_bytes_are_exact() -> None:
    assert [index_dtype(n) for n in (256, 257, 32768, 32769)] == [
        torch.uint8,
        torch.int16,
        torch.int16,
        torch.int32,
    ]
    ctx = FEDERATION.round(1)
    tensors = update()
    sparse, _ = TopK(ratio=0.05).encode(ctx, 0, tensors, None)
    assert sparse["w.indices"].dtype == torch.int16 and "w.bitmap" not in sparse
    # 60 values + 60 int16 positions + 2 int32 dims; v: 1 value, 1 uint8, 1 dim; steps: 8
    assert nbytes(sparse) == serialized_length(sparse) == 60 * 6 + 8 + 4 + 1 + 4 + 8
    dense, _ = TopK(ratio=0.5).encode(ctx, 0, tensors, None)
    assert "w.bitmap" in dense and "w.indices" not in dense  # 150 bytes < 600 × 2
    assert nbytes(dense) == serialized_length(dense) == 600 * 4 + 150 + 8 + 4 * 4 + 1 + 4 + 8
    decoded, _ = TopK(ratio=0.5).decode(ctx, 0, dense, None)
    assert int((decoded["w"] != 0).sum()) == 600


def test_error_feedback_sends_in_total_what_the_client_computed() -> None:
    """Σ_t decoded_t + e_T = Σ_t Δ_t: nothing is lost, only delayed."""
    top = TopK(ratio=0.05)
    state: StateDict | None = None
    sent = {name: torch.zeros_like(t) for name, t in update().items() if name != "steps"}
    true = {name: torch.zeros_like(t) for name, t in sent.items()}
    for round_index in range(1, 8):
        ctx = FEDERATION.round(round_index)
        delta = update(scale=round_index)
        payload, state = top.encode(ctx, 3, delta, state)
        decoded, _ = top.decode(ctx, 3, payload, None)
        for name in sent:
            sent[name] += decoded[name]
            true[name] += delta[name]
    assert state is not None
    for name in sent:
        assert torch.allclose(sent[name] + state[name], true[name], atol=1e-4)


def test_random_k_is_unbiased_and_sends_only_values() -> None:
    rand = RandK(ratio=0.1)
    tensors = {"w": torch.linspace(-1, 1, 200).view(20, 10)}
    total = torch.zeros(20, 10)
    draws = 2000
    for draw in range(draws):
        ctx = FEDERATION.round(draw + 1)
        payload, state = rand.encode(ctx, 2, tensors, None)
        assert state is None
        assert nbytes(payload) == serialized_length(payload) == 20 * 4 + 2 * 4
        decoded, _ = rand.decode(ctx, 2, payload, None)
        assert int((decoded["w"] != 0).sum()) == 20
        total += decoded["w"]
    # each entry: mean of 2000 draws of (n/k)·v·Bernoulli(k/n): std ≈ |v|·√(9/2000) ≤ 0.07
    assert torch.allclose(total / draws, tensors["w"], atol=0.25)
    assert float((total / draws - tensors["w"]).abs().mean()) < 0.06


def test_compressed_runs_count_the_payload_and_resume_bit_exactly_from_the_disk_store(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compressed = [*TINY, "compression=topk", "compression.ratio=0.05", "fl.client_state=disk"]
    run_job(make_job(compressed), tmp_path / "full")
    run_killed_in_round(make_job(compressed), tmp_path / "killed", 3, monkeypatch)
    run_job(make_job([*compressed, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    assert rows_without_timings(tmp_path / "resumed") == rows_without_timings(tmp_path / "full")
    plain = tmp_path / "plain"
    run_job(make_job(TINY), plain)
    up = [int(r["bytes_up"]) for r in read_rows(tmp_path / "full")]
    assert all(0 < u < 0.1 * int(r["bytes_up"]) for u, r in zip(up, read_rows(plain), strict=True))
