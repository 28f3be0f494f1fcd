"""The quantizing upload compressors: bit packing, QSGD (unbiased, levels in range, seeded by
(seed, round, client)), int8 (error within half a step, constant blocks exact), scaled sign, the
exact bytes of their payloads, error feedback that loses nothing over rounds, and untouched
non-float32 entries."""

import math

import pytest
import torch

from fedlight.compression.int8 import Int8
from fedlight.compression.packing import pack_bits, packed_size, unpack_bits
from fedlight.compression.qsgd import QSGD
from fedlight.compression.sign import Sign
from fedlight.config import ConfigError
from fedlight.context import Federation, RoundContext
from fedlight.tensors import StateDict, nbytes
from fedlight.wire.base import UPLOAD, Wire, WireTransform


def context(round_index: int = 1, seed: int = 0) -> RoundContext:
    federation = Federation(num_clients=10, trainable=frozenset({"w"}), seed=seed)
    return federation.round(round_index, selected=tuple(range(10)), lrs=(0.1,))


def round_trip(
    transform: WireTransform, tensors: StateDict, round_index: int = 1, client: int = 0
) -> tuple[StateDict, StateDict]:
    ctx = context(round_index)
    payload, _ = transform.encode(ctx, client, tensors, None)
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


@pytest.mark.parametrize("bits", [1, 4, 8])
def test_qsgd_levels_lie_in_zero_to_s_and_decode_to_multiples_of_the_norm(bits: int) -> None:
    qsgd = QSGD(bits=bits)
    v = torch.randn(3, 333, generator=torch.Generator().manual_seed(bits))
    v[0, 0] = 0.0
    payload, decoded = round_trip(qsgd, {"w": v})
    levels = unpack_bits(payload["w.levels"], bits, v.numel())
    assert int(levels.min()) >= 0 and int(levels.max()) <= qsgd.levels == 2**bits - 1
    assert payload["w.norm"].item() == pytest.approx(float(v.double().norm()), rel=1e-6)
    assert payload["w.shape"].tolist() == [3, 333] and payload["w.shape"].dtype == torch.int32
    expected = payload["w.norm"] * torch.sign(v).reshape(-1) * levels.float() / qsgd.levels
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
    first, _ = qsgd.encode(context(3), 4, v, None)
    again, _ = qsgd.encode(context(3), 4, v, None)
    assert all(torch.equal(first[key], again[key]) for key in first)
    other_client, _ = qsgd.encode(context(3), 5, v, None)
    other_round, _ = qsgd.encode(context(4), 4, v, None)
    other_seed, _ = qsgd.encode(context(3, seed=1), 4, v, None)
    for other in (other_client, other_round, other_seed):
        assert not torch.equal(first["w.levels"], other["w.levels"])
    here, _ = qsgd.decode(context(3), 4, first, None)
    elsewhere, _ = QSGD(bits=2).decode(context(99), 0, first, None)
    assert torch.equal(here["w"], elsewhere["w"])


def test_qsgd_refuses_bits_outside_one_to_eight() -> None:
    for bits in (0, 9):
        with pytest.raises(ConfigError, match="between 1 and 8"):
            QSGD(bits=bits)


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
    first, _ = Int8(block_size=16).encode(context(1), 0, v, None)
    other, _ = Int8(block_size=16).encode(context(7), 3, v, None)
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
        (QSGD(bits=4), 4 + math.ceil(1000 / 8) + math.ceil(4000 / 8) + 4 * 2),
        (QSGD(bits=1), 4 + 125 + 125 + 8),
        (QSGD(bits=3), 4 + 125 + 375 + 8),
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
    payload, _ = round_trip(QSGD(bits=5), tensors)
    expected = sum(
        4 + math.ceil(t.numel() / 8) + math.ceil(5 * t.numel() / 8) + 4 * t.dim()
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
        payload, state = transform.encode(ctx, 2, {"w": v}, state)
        decoded, _ = transform.decode(ctx, 2, payload, None)
        arrived += decoded["w"].double()
    assert state is not None
    total = torch.stack(inputs).double().sum(0)
    assert torch.allclose(arrived + state["w"].double(), total, atol=1e-5)


@pytest.mark.parametrize("transform", [QSGD(), Int8(block_size=8), Sign(error_feedback=False)])
def test_without_error_feedback_no_state_is_kept(transform: WireTransform) -> None:
    assert not transform.sender_state
    assert transform.encode(context(), 0, {"w": torch.randn(5)}, None)[1] is None


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
        payload, _ = transform.encode(ctx, client, v, None)
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
        QSGD().encode(context(), 0, tensors, None)
