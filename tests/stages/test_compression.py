"""Sparsifying compressors (`upload=[topk]`, `[randk]`): what they keep, the exact bytes they
send, error feedback's bookkeeping, unbiasedness of random-k, and runs that resume bit-exactly
with the residuals in the disk client store; SCAFFOLD's two residuals; the compressed broadcast
(`download=[int8]`), the traffic in summary.json and the wire's timing columns."""

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from fedlight.core.context import Federation
from fedlight.core.errors import ConfigError
from fedlight.core.tensors import StateDict, nbytes
from fedlight.runs.experiment import resumed_checkpoint, run_job
from fedlight.runs.job import Job
from fedlight.stages.compression.randk import RandK
from fedlight.stages.compression.topk import TopK, index_dtype
from fedlight.stages.wire.base import UPLOAD, Payload, Wire
from fedlight.stages.wire.fp16 import FP16
from fedlight.store.checkpoint import load_checkpoint
from fedlight.store.run_files import CHECKPOINT_NAME
from tests.conftest import TINY, rows_without_timings, run_killed_in_round
from tests.stages.test_pipeline import read_rows

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
        ctx, 0, TopK(ratio=1.0, scope=scope).encode(ctx, 0, Payload(tensors), None)[0], None
    )
    assert all(torch.equal(exact[n], tensors[n]) for n in tensors)
    assert list(exact) == list(tensors)

    top = TopK(ratio=0.1, scope=scope, error_feedback=False)
    decoded, _ = top.decode(ctx, 0, top.encode(ctx, 0, Payload(tensors), None)[0], None)
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
    sparse, _ = TopK(ratio=0.05).encode(ctx, 0, Payload(tensors), None)
    assert sparse["w.indices"].dtype == torch.int16 and "w.bitmap" not in sparse
    # 60 values + 60 int16 positions + 2 int32 dims; v: 1 value, 1 uint8, 1 dim; steps: 8
    assert nbytes(sparse) == serialized_length(sparse) == 60 * 6 + 8 + 4 + 1 + 4 + 8
    dense, _ = TopK(ratio=0.5).encode(ctx, 0, Payload(tensors), None)
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
        payload, state = top.encode(ctx, 3, Payload(delta), state)
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
        payload, state = rand.encode(ctx, 2, Payload(tensors), None)
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
    compressed = [*TINY, "upload=[topk]", "upload.topk.ratio=0.05", "fl.client_state=disk"]
    run_job(make_job(compressed), tmp_path / "full")
    run_killed_in_round(make_job(compressed), tmp_path / "killed", 3, monkeypatch)
    run_job(make_job([*compressed, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    assert rows_without_timings(tmp_path / "resumed") == rows_without_timings(tmp_path / "full")
    plain = tmp_path / "plain"
    run_job(make_job(TINY), plain)
    up = [int(r["bytes_up"]) for r in read_rows(tmp_path / "full")]
    assert all(0 < u < 0.1 * int(r["bytes_up"]) for u, r in zip(up, read_rows(plain), strict=True))


def test_scaffold_compresses_delta_y_and_delta_c_each_with_its_own_residual(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """Both parts of SCAFFOLD's upload go through top-k; each key keeps its own residual in the
    client's state, checkpointed with it."""
    run_job(make_job([*TINY, "algo=scaffold", "upload=[topk]"]), tmp_path)
    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    trained = [state for state in checkpoint["client_states"].values() if state]
    assert trained
    prefix = "wire/upload.topk/"
    for state in trained:
        residuals = {key.removeprefix(prefix): t for key, t in state.items() if prefix in key}
        delta_y = {key for key in residuals if key.startswith("delta_y/")}
        delta_c = {key for key in residuals if key.startswith("delta_c/")}
        assert {k.removeprefix("delta_y/") for k in delta_y} == {
            k.removeprefix("delta_c/") for k in delta_c
        }
        assert delta_y and len(residuals) == 2 * len(delta_y)
        for key in delta_y:
            twin = "delta_c/" + key.removeprefix("delta_y/")
            assert residuals[key].abs().sum() > 0 and residuals[twin].abs().sum() > 0
            assert not torch.equal(residuals[key], residuals[twin])


def test_the_broadcast_model_is_quantized_and_traffic_and_codec_time_are_reported(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """download=[int8] sends about a quarter of the float32 model; summary.json has
    upload MB and the MB spent until the target accuracy; the wire's encode and decode seconds
    are in metrics.csv for each direction with a chain."""
    target = [*TINY, "eval.target_accuracy=0.01"]
    plain, both = tmp_path / "plain", tmp_path / "both"
    run_job(make_job(target), plain)
    run_job(make_job([*target, "upload=[int8]", "download=[int8]"]), both)
    rows = read_rows(both)
    for plain_row, row in zip(read_rows(plain), rows, strict=True):
        assert 0.25 < int(row["bytes_down"]) / int(plain_row["bytes_down"]) < 0.26
        assert 0.25 < int(row["bytes_up"]) / int(plain_row["bytes_up"]) < 0.26
        for direction in ("upload", "download"):
            for side in ("encode", "decode"):
                assert float(row[f"wire.{direction}.{side}_seconds"]) > 0
    assert not any("seconds" in c and c.startswith("wire.") for c in read_rows(plain)[0])
    summary = json.loads((both / "summary.json").read_text())
    first = rows[0]  # above 1% from the first round on
    assert summary["mb_to_target"] == (int(first["bytes_up"]) + int(first["bytes_down"])) / 1e6
    assert summary["upload_mb_to_target"] == int(first["bytes_up"]) / 1e6
    assert summary["upload_mb"] == sum(int(r["bytes_up"]) for r in rows) / 1e6


def test_a_download_compressor_with_error_feedback_is_refused_in_one_line(
    make_job: Callable[[list[str]], Job],
) -> None:
    with pytest.raises(ConfigError, match=r"^download.int8.error_feedback=true: .*=false$"):
        make_job([*TINY, "download=[int8]", "download.int8.error_feedback=true"])


def test_a_checkpoint_of_the_groups_before_upload_and_download_is_refused_in_one_line(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """A checkpoint written with `compression=topk wire=fp16` names its clients' residuals by
    those groups (`wire/upload.compression/...`): resumed as `upload=[topk,fp16]` they would be
    lost, so it is refused, naming the groups."""
    overrides = [*TINY, "fl.rounds=1", "upload=[topk,fp16]"]
    run_job(make_job(overrides), tmp_path / "run")
    path = tmp_path / "run" / CHECKPOINT_NAME
    checkpoint = load_checkpoint(path)
    config = json.loads(checkpoint["config"])
    config["compression"], config["wire"] = config.pop("upload")["topk"], {"upload": {}}
    checkpoint["config"] = json.dumps(config)
    torch.save(checkpoint, path)
    with pytest.raises(ConfigError, match=r"written before the groups upload and download "):
        resumed_checkpoint(make_job([*overrides, f"resume={tmp_path / 'run'}"]))


def test_a_compressor_chains_with_the_wire_cast_that_follows_it() -> None:
    """upload=[topk,fp16]: top-k's float32 values travel as float16 (their positions and
    shapes as they are), and the receiver undoes the chain in reverse."""
    ctx = FEDERATION.round(1)
    tensors = update()
    alone, _ = TopK(ratio=0.1).encode(ctx, 0, Payload(tensors), None)
    wire = Wire(upload={"compression": TopK(ratio=0.1), "fp16": FP16()})
    payload, _ = wire.send(UPLOAD, ctx, 0, tensors, {})
    assert payload["w.values"].dtype == torch.float16
    assert nbytes(payload) == serialized_length(payload)
    assert nbytes(alone) - nbytes(payload) == 2 * (alone["w.values"].numel() + 1)  # w and v
    decoded, _ = wire.receive(UPLOAD, ctx, 0, payload, {})
    expected, _ = TopK(ratio=0.1).decode(ctx, 0, alone, None)
    for name, t in expected.items():
        if t.dtype == torch.float32:
            assert torch.equal(decoded[name], t.half().float())
        else:
            assert torch.equal(decoded[name], t)
