"""The quantizing upload compressors: bit packing, QSGD (unbiased in every bucket, its error
against the paper's bound, levels in range, seeded by (seed, round, client), the behaviour and
checkpoints of before buckets), int8 (error within half a step, constant blocks exact), scaled
sign, the exact bytes of their payloads, error feedback that loses nothing over rounds, untouched
non-float32 entries, and a wire cast after a quantizer that leaves its metadata alone."""

import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import Tensor

from fedlight.core.context import Federation, RoundContext
from fedlight.core.errors import ConfigError
from fedlight.core.tensors import StateDict, nbytes
from fedlight.runs.experiment import resumed_checkpoint, run_job
from fedlight.runs.job import Job
from fedlight.stages.compression.int8 import Int8
from fedlight.stages.compression.packing import pack_bits, packed_size, unpack_bits
from fedlight.stages.compression.qsgd import QSGD
from fedlight.stages.compression.sign import Sign
from fedlight.stages.wire.base import UPLOAD, Payload, Wire, WireTransform
from fedlight.store.checkpoint import load_checkpoint
from fedlight.store.run_files import CHECKPOINT_NAME
from tests.conftest import TINY, rows_without_timings, run_killed_in_round
from tests.stages.test_pipeline import read_rows


def context(round_index: int = 1, seed: int = 0) -> RoundContext:
    federation = Federation(num_clients=10, trainable=frozenset({"w"}), seed=seed)
    return federation.round(round_index, selected=tuple(range(10)), lrs=(0.1,))


def round_trip(
    transform: WireTransform, tensors: StateDict, round_index: int = 1, client: int = 0
) -> tuple[StateDict, StateDict]:
    ctx = context(round_index)
    payload, _ = transform.encode(ctx, client, Payload(tensors), None)
    decoded, _ = transform.decode(ctx, client, payload, None)
    return payload, decoded


def raw_bytes(payload: StateDict) -> bytes:
    return b"".join(t.cpu().numpy().tobytes() for t in payload.values())


# Bit packing -------------------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [*range(1, 9), 12, 16])
@pytest.mark.parametrize("count", [0, 1, 7, 13, 1001])
def test_pack_then_unpack_returns_the_values_in_the_fewest_bytes(bits: int, count: int) -> None:
    values = torch.randint(0, 1 << bits, (count,), generator=torch.Generator().manual_seed(bits))
    packed = pack_bits(values, bits)
    assert packed.dtype == torch.uint8 and packed.numel() == math.ceil(count * bits / 8)
    assert packed.numel() == packed_size(count, bits)
    assert torch.equal(unpack_bits(packed, bits, count), values)


def test_bits_are_packed_least_significant_first_across_byte_boundaries() -> None:
    assert pack_bits(torch.tensor([1, 0, 1, 1]), 1).tolist() == [0b1101]
    assert pack_bits(torch.tensor([3, 1]), 4).tolist() == [0x13]
    # 5, 6, 7 in 3 bits: stream 1,0,1 | 0,1,1 | 1,1,1 → bytes 0b11110101, 0b1.
    assert pack_bits(torch.tensor([5, 6, 7]), 3).tolist() == [0b11110101, 0b1]


def test_packing_refuses_values_that_do_not_fit() -> None:
    with pytest.raises(ValueError, match="values must lie"):
        pack_bits(torch.tensor([4]), 2)
    with pytest.raises(ValueError, match="need 1 uint8"):
        unpack_bits(torch.zeros(2, dtype=torch.uint8), 4, 2)


# QSGD --------------------------------------------------------------------------------------------


def test_qsgd_is_unbiased_over_rounds_and_clients() -> None:
    """E[‖v‖·sign(v_i)·ξ_i/s] = v_i; each draw's entry has standard deviation ≤ ‖v‖/(2s), so the
    mean of 2,000 draws lies within 5 standard errors of v."""
    qsgd = QSGD(bits=2)
    v = torch.randn(20, generator=torch.Generator().manual_seed(1))
    draws = 2000
    total = torch.zeros(20, dtype=torch.float64)
    for draw in range(draws):
        _, decoded = round_trip(qsgd, {"w": v}, round_index=1 + draw // 10, client=draw % 10)
        total += decoded["w"].double()
    standard_error = float(v.norm()) / (2 * qsgd.levels) / math.sqrt(draws)
    assert (total / draws - v.double()).abs().max() < 5 * standard_error


def test_qsgd_is_unbiased_in_every_bucket_the_last_one_partial() -> None:
    """Buckets of 16 over 50 entries (16, 16, 16, 2): each entry's draws have standard deviation
    ≤ ‖v_b‖/(2s) for its bucket b, so the mean of 2,000 draws lies within 5 standard errors of v
    (a tighter test than one norm for all: the buckets' norms differ by a factor 10)."""
    qsgd = QSGD(bits=2, bucket_size=16)
    v = torch.randn(50, generator=torch.Generator().manual_seed(3))
    v[16:32] *= 10  # the second bucket's norm is ten times the others'
    draws = 2000
    total = torch.zeros(50, dtype=torch.float64)
    for draw in range(draws):
        _, decoded = round_trip(qsgd, {"w": v}, round_index=1 + draw // 10, client=draw % 10)
        total += decoded["w"].double()
    bucket_norms = torch.cat([b.double().norm().expand(len(b)) for b in v.split(16)])
    standard_error = bucket_norms / (2 * qsgd.levels) / math.sqrt(draws)
    assert ((total / draws - v.double()).abs() < 5 * standard_error).all()


def relative_squared_error(qsgd: QSGD, v: Tensor, draws: int) -> float:
    """‖Q(v) − v‖²/‖v‖², averaged over `draws` seeded draws (rounds 1 … draws)."""
    errors = [
        (round_trip(qsgd, {"w": v}, round_index=r)[1]["w"].double() - v.double()).square().sum()
        for r in range(1, draws + 1)
    ]
    return float(torch.stack(errors).mean() / v.double().square().sum())


def expected_relative_squared_error(v: Tensor, bucket_size: int, levels: int) -> float:
    """E‖Q(v) − v‖²/‖v‖² by hand: entry i of bucket b rounds s·|v_i|/‖v_b‖ = l + p (0 ≤ p < 1)
    up with probability p, so its variance is (‖v_b‖/s)²·p(1 − p) (the paper's Lemma 3.1)."""
    total = 0.0
    for bucket in v.reshape(-1).double().split(bucket_size):
        norm = float(bucket.norm().float())  # the float32 norm that travels
        fraction = torch.frac(levels * bucket.abs() / norm)
        total += (norm / levels) ** 2 * float((fraction * (1 - fraction)).sum())
    return total / float(v.double().square().sum())


def test_qsgd_at_4_bits_in_buckets_of_512_stays_within_the_papers_variance_bound(
    make_job: Callable[[list[str]], Job],
) -> None:
    """A 200×200 tensor at 4 bits (s = 15): one norm for all 40,000 entries gives a relative
    squared error of about 9.6 (bound min(n/s², √n/s) = 13.3); the default buckets of d = 512
    give 0.38, under the paper's bound min(d/s², √d/s) = 1.51, and as computed by hand."""
    qsgd = make_job([*TINY, "upload=[qsgd]"]).stages.wire.upload["qsgd"]
    assert isinstance(qsgd, QSGD) and (qsgd.bits, qsgd.bucket_size) == (4, 512)
    v = torch.randn(200, 200, generator=torch.Generator().manual_seed(0))
    bound = min(512 / 15**2, math.sqrt(512) / 15)
    bucketed = relative_squared_error(qsgd, v, draws=20)
    assert bucketed == pytest.approx(expected_relative_squared_error(v, 512, 15), rel=0.02)
    assert bucketed == pytest.approx(0.38, abs=0.01) and bucketed < bound
    whole = relative_squared_error(QSGD(bits=4, bucket_size=0), v, draws=20)
    assert whole == pytest.approx(expected_relative_squared_error(v, 40_000, 15), rel=0.05)
    assert whole == pytest.approx(9.6, abs=0.3) and whole > 6 * bound


def test_bucket_size_0_sends_and_decodes_what_qsgd_did_before_buckets() -> None:
    """One bucket per tensor is the behaviour of fedlight before `upload.qsgd.bucket_size`: the
    payload's and the decoded tensors' bytes are those fedlight 8932dbd produced (digests)."""
    generator = torch.Generator().manual_seed(31)
    tensors = {
        "a": torch.randn(200, 200, generator=generator),
        "b": torch.randn(13, generator=generator),
        "c": torch.tensor(2.5),
    }
    qsgd = QSGD(bits=4, bucket_size=0)
    payload, _ = qsgd.encode(context(3), 4, Payload(tensors), None)
    decoded, _ = qsgd.decode(context(3), 4, payload, None)
    assert hashlib.sha256(raw_bytes(payload)).hexdigest() == (
        "02ded05d744f0f2b16bdea8399c852f17602c4e9d6b5af40471d3de75b485c48"
    )
    assert hashlib.sha256(raw_bytes(decoded)).hexdigest() == (
        "c2583dbd6fd410a42ead4660375cd16883d9a520f014c78495ba7abb8bdb951f"
    )


def test_qsgd_runs_count_one_norm_per_bucket_and_old_checkpoints_resume_at_one_bucket(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`bytes_up` of an `upload=[qsgd]` run is, per participant and float32 tensor of n
    entries, 4·⌈n/512⌉ + ⌈n/8⌉ + ⌈4n/8⌉ + 4·ndim. A checkpoint written before
    `upload.qsgd.bucket_size` existed (its config lacks the key) is refused at the new default,
    in one line that names the setting and the value it ran at, and resumes bit-exactly with
    `upload.qsgd.bucket_size=0`."""
    run_job(make_job([*TINY, "fl.rounds=1", "upload=[qsgd]"]), tmp_path / "default")
    weights = load_checkpoint(tmp_path / "default" / CHECKPOINT_NAME)["server_weights"]
    per_client = sum(
        4 * math.ceil(t.numel() / 512)
        + math.ceil(t.numel() / 8)
        + math.ceil(t.numel() / 2)
        + 4 * t.dim()
        for t in weights.values()
    )
    assert any(t.numel() > 512 for t in weights.values())
    [row] = read_rows(tmp_path / "default")
    assert int(row["bytes_up"]) == int(float(row["participants"])) * per_client

    old = [*TINY, "fl.rounds=3", "upload=[qsgd]", "upload.qsgd.bucket_size=0"]
    run_job(make_job(old), tmp_path / "full")
    run_killed_in_round(make_job(old), tmp_path / "killed", 3, monkeypatch)
    checkpoint = load_checkpoint(tmp_path / "killed" / CHECKPOINT_NAME)
    config = json.loads(checkpoint["config"])
    del config["upload"]["qsgd"]["bucket_size"]  # as fedlight wrote it before buckets
    checkpoint["config"] = json.dumps(config)
    torch.save(checkpoint, tmp_path / "killed" / CHECKPOINT_NAME)
    resume = f"resume={tmp_path / 'killed'}"
    with pytest.raises(
        ConfigError,
        match=r"config differs at upload.qsgd.bucket_size \(checkpoint absent, now 512\); the "
        r"checkpoint predates the setting: upload.qsgd.bucket_size=0 continues it as it ran; ",
    ):
        resumed_checkpoint(make_job([*TINY, "fl.rounds=3", "upload=[qsgd]", resume]))
    run_job(make_job([*old, resume]), tmp_path / "resumed")
    assert rows_without_timings(tmp_path / "resumed") == rows_without_timings(tmp_path / "full")


@pytest.mark.parametrize(("bits", "bucket_size"), [(1, 0), (4, 0), (8, 0), (4, 256), (2, 1)])
def test_qsgd_levels_lie_in_zero_to_s_and_decode_to_multiples_of_their_buckets_norm(
    bits: int, bucket_size: int
) -> None:
    """One norm per bucket of `bucket_size` consecutive entries (999 = 3·256 + 231: the last
    bucket is partial), or one for the tensor (0)."""
    qsgd = QSGD(bits=bits, bucket_size=bucket_size)
    v = torch.randn(3, 333, generator=torch.Generator().manual_seed(bits))
    v[0, 0] = 0.0
    payload, decoded = round_trip(qsgd, {"w": v})
    levels = unpack_bits(payload["w.levels"], bits, v.numel())
    assert int(levels.min()) >= 0 and int(levels.max()) <= qsgd.levels == 2**bits - 1
    buckets = v.reshape(-1).split(bucket_size or v.numel())
    assert len(buckets) == math.ceil(999 / (bucket_size or 999))
    norms = torch.stack([bucket.double().norm() for bucket in buckets]).float()
    assert payload["w.norm"].dtype == torch.float32
    assert torch.allclose(payload["w.norm"], norms, rtol=1e-6, atol=0)
    assert payload["w.shape"].tolist() == [3, 333] and payload["w.shape"].dtype == torch.int32
    pairs = zip(payload["w.norm"], buckets, strict=True)
    per_entry = torch.cat([norm.expand(len(bucket)) for norm, bucket in pairs])
    expected = per_entry * torch.sign(v).reshape(-1) * levels.float() / qsgd.levels
    assert torch.equal(decoded["w"], expected.reshape(3, 333))
    assert decoded["w"][0, 0].item() == 0.0


def test_a_one_entry_vector_always_decodes_exactly() -> None:
    """|v|/‖v‖ = 1, so ξ = s whatever u is."""
    _, decoded = round_trip(QSGD(bits=3), {"w": torch.tensor([-2.5])})
    assert decoded["w"].tolist() == [-2.5]


def test_a_zero_tensor_round_trips_to_zeros() -> None:
    _, decoded = round_trip(QSGD(), {"w": torch.zeros(4, 5)})
    assert torch.equal(decoded["w"], torch.zeros(4, 5))
    assert not decoded["w"].isnan().any()


def test_qsgd_is_seeded_by_seed_round_and_client_and_decodes_without_them() -> None:
    qsgd = QSGD(bits=2)
    v = {"w": torch.randn(500, generator=torch.Generator().manual_seed(2))}
    first, _ = qsgd.encode(context(3), 4, Payload(v), None)
    again, _ = qsgd.encode(context(3), 4, Payload(v), None)
    assert all(torch.equal(first[key], again[key]) for key in first)
    other_client, _ = qsgd.encode(context(3), 5, Payload(v), None)
    other_round, _ = qsgd.encode(context(4), 4, Payload(v), None)
    other_seed, _ = qsgd.encode(context(3, seed=1), 4, Payload(v), None)
    for other in (other_client, other_round, other_seed):
        assert not torch.equal(first["w.levels"], other["w.levels"])
    here, _ = qsgd.decode(context(3), 4, first, None)
    elsewhere, _ = QSGD(bits=2).decode(context(99), 0, first, None)
    assert torch.equal(here["w"], elsewhere["w"])


def test_qsgd_refuses_bits_outside_one_to_eight_and_a_negative_bucket_size() -> None:
    for bits in (0, 9):
        with pytest.raises(ConfigError, match="between 1 and 8"):
            QSGD(bits=bits)
    with pytest.raises(ConfigError, match=r"^compression.bucket_size must be ≥ 0 .*, got -1$"):
        QSGD(bucket_size=-1)


# Int8 --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("block_size", [0, 1, 7, 64, 1000, 5000])
def test_int8_is_within_half_a_step_of_each_entry(block_size: int) -> None:
    int8 = Int8(block_size=block_size)
    v = torch.randn(10, 100, generator=torch.Generator().manual_seed(block_size)) * 3
    payload, decoded = round_trip(int8, {"w": v})
    blocks = math.ceil(1000 / block_size) if block_size else 1
    assert payload["w.scale"].shape == payload["w.zero"].shape == (blocks,)
    assert payload["w.q"].dtype == torch.uint8 and payload["w.q"].shape == (1000,)
    block = block_size or 1000
    scale = payload["w.scale"].repeat_interleave(block)[:1000].reshape(10, 100)
    assert ((decoded["w"] - v).abs() <= scale / 2 + 1e-6).all()
    assert decoded["w"].shape == v.shape and decoded["w"].dtype == torch.float32


def test_int8_hits_the_minimum_and_maximum_of_each_block() -> None:
    v = torch.tensor([-1.0, 0.25, 3.0, 2.0, 2.0, 7.0, -4.0])
    payload, decoded = round_trip(Int8(block_size=3), {"w": v})
    assert payload["w.zero"].tolist() == [-1.0, 2.0, -4.0]
    assert payload["w.q"][[0, 2, 3, 5, 6]].tolist() == [0, 255, 0, 255, 0]
    assert decoded["w"][[0, 3, 6]].tolist() == [-1.0, 2.0, -4.0]
    assert decoded["w"][[2, 5]].tolist() == pytest.approx([3.0, 7.0], abs=1e-6)


@pytest.mark.parametrize("block_size", [0, 4])
def test_constant_blocks_round_trip_exactly(block_size: int) -> None:
    v = torch.tensor([0.1, 0.1, 0.1, 0.1, -3.7, -3.7, -3.7, -3.7, 0.0, 0.0])
    if block_size == 0:
        v = torch.full((3, 3), 0.1)
    payload, decoded = round_trip(Int8(block_size=block_size), {"w": v})
    assert torch.equal(decoded["w"], v)
    assert not payload["w.q"].any()


def test_int8_is_deterministic() -> None:
    v = {"w": torch.randn(300, generator=torch.Generator().manual_seed(3))}
    first, _ = Int8(block_size=16).encode(context(1), 0, Payload(v), None)
    other, _ = Int8(block_size=16).encode(context(7), 3, Payload(v), None)
    assert all(torch.equal(first[key], other[key]) for key in first)


def test_int8_refuses_a_negative_block_size() -> None:
    with pytest.raises(ConfigError, match="block_size"):
        Int8(block_size=-1)


# Scaled sign -----------------------------------------------------------------------------------


def test_sign_sends_the_mean_magnitude_with_each_sign_and_zero_as_plus() -> None:
    v = torch.tensor([[0.5, -1.5], [0.0, -2.0]])
    payload, decoded = round_trip(Sign(), {"w": v})
    assert torch.equal(decoded["w"], torch.tensor([[1.0, -1.0], [1.0, -1.0]]))
    assert float(payload["w.scale"]) == 1.0
    # the decoded tensor has the input's ℓ1 norm
    w = torch.randn(7, 5)
    assert float(round_trip(Sign(), {"w": w})[1]["w"].abs().sum()) == pytest.approx(
        float(w.abs().sum()), rel=1e-6
    )


# All: bytes, error feedback, other dtypes, the metric, the wire ---------------------------------


@pytest.mark.parametrize(
    ("transform", "expected"),
    [
        # norms (4 bytes per bucket of 512: 2), signs, levels, shape
        (QSGD(bits=4), 4 * 2 + math.ceil(1000 / 8) + math.ceil(4000 / 8) + 4 * 2),
        (QSGD(bits=4, bucket_size=0), 4 + 125 + 500 + 8),
        (QSGD(bits=1), 8 + 125 + 125 + 8),
        (QSGD(bits=3, bucket_size=300), 4 * 4 + 125 + 375 + 8),
        (QSGD(bits=2, bucket_size=1000), 4 + 125 + 250 + 8),
        (Int8(), 1000 + 4 + 4 + 8),
        (Int8(block_size=64), 1000 + 4 * 16 + 4 * 16 + 8),
        (Sign(), 4 + math.ceil(1000 / 8) + 8),
    ],
)
def test_the_counted_bytes_are_the_serialized_bytes(
    transform: WireTransform, expected: int
) -> None:
    payload, _ = round_trip(transform, {"w": torch.randn(20, 50)})
    assert nbytes(payload) == len(raw_bytes(payload)) == expected


def test_the_bytes_of_odd_sizes_and_several_tensors() -> None:
    tensors = {"a": torch.randn(3, 7, 11), "b": torch.randn(13), "c": torch.tensor(2.0)}
    payload, _ = round_trip(QSGD(bits=5, bucket_size=10), tensors)
    expected = sum(
        4 * math.ceil(t.numel() / 10)
        + math.ceil(t.numel() / 8)
        + math.ceil(5 * t.numel() / 8)
        + 4 * t.dim()
        for t in tensors.values()
    )
    assert nbytes(payload) == len(raw_bytes(payload)) == expected
    payload, decoded = round_trip(Int8(block_size=10), tensors)
    expected = sum(
        t.numel() + 8 * math.ceil(t.numel() / 10) + 4 * t.dim() for t in tensors.values()
    )
    assert nbytes(payload) == len(raw_bytes(payload)) == expected
    assert {name: t.shape for name, t in decoded.items()} == {
        name: t.shape for name, t in tensors.items()
    }


@pytest.mark.parametrize(
    "transform", [QSGD(bits=2, error_feedback=True), Int8(error_feedback=True), Sign()]
)
def test_error_feedback_loses_nothing_over_rounds(transform: WireTransform) -> None:
    """e_T = Σ_t v_t − Σ_t decoded_t: what did not arrive yet is exactly the residual."""
    assert transform.sender_state
    generator = torch.Generator().manual_seed(4)
    inputs = [torch.randn(6, 9, generator=generator) for _ in range(8)]
    state = None
    arrived = torch.zeros(6, 9, dtype=torch.float64)
    for round_index, v in enumerate(inputs, start=1):
        ctx = context(round_index)
        payload, state = transform.encode(ctx, 2, Payload({"w": v}), state)
        decoded, _ = transform.decode(ctx, 2, payload, None)
        arrived += decoded["w"].double()
    assert state is not None
    total = torch.stack(inputs).double().sum(0)
    assert torch.allclose(arrived + state["w"].double(), total, atol=1e-5)


@pytest.mark.parametrize("transform", [QSGD(), Int8(block_size=8), Sign(error_feedback=False)])
def test_without_error_feedback_no_state_is_kept(transform: WireTransform) -> None:
    assert not transform.sender_state
    assert transform.encode(context(), 0, Payload({"w": torch.randn(5)}), None)[1] is None


@pytest.mark.parametrize("transform", [QSGD(), Int8(block_size=4), Sign()])
def test_non_float32_entries_travel_unchanged(transform: WireTransform) -> None:
    tensors = {
        "steps": torch.tensor(17),
        "w": torch.randn(9),
        "double": torch.randn(3, dtype=torch.float64),
        "half": torch.randn(3).half(),
    }
    payload, decoded = round_trip(transform, tensors)
    for name in ("steps", "double", "half"):
        assert payload[name] is tensors[name] and decoded[name] is tensors[name]
    assert list(decoded) == list(tensors)


@pytest.mark.parametrize(
    ("transform", "metric"),
    [
        (QSGD(), "compression.qsgd.sq_error"),
        (Int8(block_size=5), "compression.int8.sq_error"),
        (Sign(), "compression.sign.sq_error"),
    ],
)
def test_the_squared_error_of_the_round_is_reported(transform: WireTransform, metric: str) -> None:
    ctx = context()
    expected = 0.0
    for client in (0, 1):
        v = {"w": torch.randn(4, 6), "b": torch.randn(6)}
        payload, _ = transform.encode(ctx, client, Payload(v), None)
        decoded, _ = transform.decode(ctx, client, payload, None)
        expected += sum(float((v[n] - decoded[n]).double().square().sum()) for n in v)
    assert ctx.metrics.values[metric] == pytest.approx(expected, rel=1e-9)
    assert expected > 0


@pytest.mark.parametrize("transform", [QSGD(bits=8), Int8()])
def test_the_wire_chain_sends_and_receives_a_model(transform: WireTransform) -> None:
    wire = Wire(upload={"compress": transform})
    ctx = context()
    model = {"layer.weight": torch.randn(4, 3), "layer.bias": torch.randn(4), "n": torch.tensor(3)}
    payload, _ = wire.send(UPLOAD, ctx, 1, model, {})
    decoded, _ = wire.receive(UPLOAD, ctx, 1, payload, {})
    assert list(decoded) == list(model)
    for name, t in model.items():
        assert decoded[name].dtype == t.dtype
        assert torch.allclose(decoded[name], t, atol=0.1 * float(t.float().abs().max()))


@pytest.mark.parametrize(
    "tensors",
    [
        {"w.norm": torch.tensor(1), "w": torch.randn(3)},
        {"w": torch.randn(3), "w.norm": torch.tensor(1)},
    ],
)
def test_a_payload_entry_is_never_written_twice(tensors: StateDict) -> None:
    with pytest.raises(ValueError, match="written twice"):
        QSGD().encode(context(), 0, Payload(tensors), None)


# A wire cast after a quantizer ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("transform", "metadata"),
    [
        (QSGD(), {"w.norm", "w.shape"}),
        (Int8(block_size=4), {"w.scale", "w.zero", "w.shape"}),
        (Sign(), {"w.scale", "w.shape"}),
    ],
)
def test_a_quantizers_payload_names_its_metadata(
    transform: WireTransform, metadata: set[str]
) -> None:
    """Which entries are metadata is said by the payload's type, not guessed from names or
    dtypes: the quantizer's parts other than its codes, and what was metadata before it."""
    tensors = Payload({"w": torch.randn(9), "earlier": torch.randn(2)}, metadata={"earlier"})
    payload, _ = transform.encode(context(), 0, tensors, None)
    assert isinstance(payload, Payload) and payload.metadata == {*metadata, "earlier"}
    assert payload["earlier"] is tensors["earlier"]  # metadata from before passes untouched


def huge_update() -> StateDict:
    """An update whose QSGD norms, int8 zero points and sign scales lie beyond float16's 65504,
    and an integer buffer."""
    generator = torch.Generator().manual_seed(8)
    return {
        "layer.weight": torch.randn(30, 40, generator=generator) * 1e5,
        "layer.bias": torch.randn(30, generator=generator) * 1e5,
        "steps": torch.tensor(7),
    }


@pytest.mark.parametrize(
    ("compression", "wire"),
    [("qsgd", "fp16"), ("int8", "fp16"), ("sign", "fp16"), ("qsgd", "bf16"), ("int8", "bf16")],
)
def test_a_cast_after_a_quantizer_sends_its_metadata_bit_for_bit(
    make_job: Callable[[list[str]], Job], compression: str, wire: str
) -> None:
    """`upload=[<quantizer>,fp16|bf16]`, the wire the config builds: the cast has no
    values left to cast (the codes are integers, the rest metadata), so the payload is the
    quantizer's to the bit, float32 norms, scales and zero points beyond 65504 included, its
    bytes are the quantizer's alone, and it decodes finitely to what the quantizer decodes."""
    cast = make_job([*TINY, f"upload=[{compression},{wire}]"]).stages.wire
    alone = make_job([*TINY, f"upload=[{compression}]"]).stages.wire
    assert list(cast.upload) == [compression, wire] and list(alone.upload) == [compression]
    ctx = context()
    update = huge_update()
    payload, _ = cast.send(UPLOAD, ctx, 3, update, {})
    expected, _ = alone.send(UPLOAD, context(), 3, update, {})
    assert list(payload) == list(expected)
    for key, t in expected.items():
        assert payload[key].dtype == t.dtype and torch.equal(payload[key], t), key
    floats = [t for t in payload.values() if t.dtype == torch.float32]
    assert floats and max(float(t.abs().max()) for t in floats) > 65504
    assert nbytes(payload) == len(raw_bytes(payload)) == nbytes(expected)
    assert ctx.metrics.values[f"wire.{'float16' if wire == 'fp16' else 'bfloat16'}.sq_error"] == 0
    decoded, _ = cast.receive(UPLOAD, ctx, 3, payload, {})
    reference, _ = alone.receive(UPLOAD, context(), 3, expected, {})
    for name, t in reference.items():
        assert torch.equal(decoded[name], t) and decoded[name].isfinite().all(), name


@pytest.mark.parametrize("compression", ["qsgd", "int8", "sign"])
def test_a_huge_update_crosses_a_float16_wire_after_a_quantizer(
    make_job: Callable[[list[str]], Job], tmp_path: Path, compression: str
) -> None:
    """Every client boosts its update by 10⁹ (`attack=scaled`), so QSGD's norms, int8's zero
    points and sign's scales exceed 65504, float16's largest value: cast to float16 they became
    infinite and every upload was rejected as non-finite; now each arrives and is aggregated."""
    boosted = ["attack=scaled", "attack.fraction=1.0", "attack.scale=1e9"]
    overrides = [*TINY, "fl.rounds=1", f"upload=[{compression},fp16]", *boosted]
    run_job(make_job(overrides), tmp_path)
    [row] = read_rows(tmp_path)
    assert float(row["malicious"]) == float(row["participants"]) == 4
    assert float(row["rejected"]) == 0 and math.isfinite(float(row["train_loss"]))
    assert float(row["wire.float16.sq_error"]) == 0
    weights = load_checkpoint(tmp_path / CHECKPOINT_NAME)["server_weights"]
    assert all(t.isfinite().all() for t in weights.values())
