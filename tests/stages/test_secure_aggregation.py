"""Secure aggregation (`secure_aggregation=pairwise`): the unmasked sum is the plain sum, a masked
upload says nothing of its update, dropped clients' masks are recovered (or the round refused),
bytes count the key agreement, DP-FedAvg composes, what needs each update is refused, and one
worker equals two."""

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from fedlight.aggregation.base import RoundRefused
from fedlight.algorithms.fedavg import BUFFERS, UPDATE, FedAvg
from fedlight.cli import schema
from fedlight.core.context import Federation, RoundContext
from fedlight.core.errors import ConfigError
from fedlight.core.messages import ClientUpload, LocalResult
from fedlight.round.server import ServerRound
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from fedlight.stages.base import ClientStep, UploadStage
from fedlight.stages.pool import ClientPool
from fedlight.stages.privacy.base import as_state
from fedlight.stages.privacy.dp_fedavg import DPFedAvg
from fedlight.stages.secure_aggregation.pairwise import PairwiseMasking
from tests.conftest import TINY, rows_without_timings, run_killed_in_round

FEDERATION = Federation(num_clients=20, trainable=frozenset({"w", "b"}), seed=3)


def upload_of(client: int, scale: float = 1.0, size: int = 4000) -> ClientUpload:
    generator = torch.Generator().manual_seed(100 + client)
    tensors = {
        "w": scale * torch.randn(size, generator=generator),
        "b": scale * torch.randn(7, generator=generator),
        "running": torch.randn(3, generator=generator),  # a buffer: the BUFFERS part
    }
    return ClientUpload(client, 5 + 3 * client, 2, tensors)


def masked(
    ctx: RoundContext, stages: list[UploadStage], upload: ClientUpload, broadcast: dict
) -> ClientUpload:
    """`upload` through the client side of `stages` (the last must be the masking)."""
    local = LocalResult(upload.client_id, {}, upload.num_samples, upload.num_steps, 0.1, 0.0)
    pool = ClientPool([], lambda *_: 0.0)  # type: ignore[arg-type]  # asked nothing here
    step = ClientStep(ctx, upload.client_id, local, FedAvg(), broadcast, pool, stages)
    for stage in stages:
        upload, _ = stage.client_side(step, upload, None)
    return upload


def aggregate(
    ctx: RoundContext,
    stages: list[UploadStage],
    uploads: list[ClientUpload],
    broadcast: dict,
    senders: int | None = None,
) -> dict:
    """The server's aggregates of `uploads` (the first `senders` arrive; the others drop out)."""
    server = ServerRound.start(
        ctx, FedAvg(), stages, broadcast, [upload.num_samples for upload in uploads]
    )
    for index, upload in enumerate(uploads):
        if senders is None or index < senders:
            server.add(upload)
        else:
            server.drop_late(upload.contributor)
    return dict(server.aggregation.results())


def test_the_unmasked_sum_is_the_plain_weighted_mean_and_a_masked_upload_is_uniform() -> None:
    """Five clients' FedAvg parts: the server's mean from the masked uploads equals the plain
    sample-weighted mean to float tolerance (parameters and buffers); one masked upload is
    uniform on the ring (mean 2^61 ± 5 standard errors) and uncorrelated with its update
    (|r| < 5/√d), and no two clients' masks are alike."""
    masking = PairwiseMasking()
    ctx = FEDERATION.round(2, (1, 4, 7, 9, 12), (0.1,))
    uploads = [upload_of(client) for client in ctx.selected]
    plain = aggregate(ctx, [], uploads, {})
    sent = [masked(ctx, [masking], upload, {}) for upload in uploads]
    secure = aggregate(ctx, [masking], sent, {})
    for part in (UPDATE, BUFFERS):
        for key, t in plain[part].items():
            assert secure[part][key].dtype == torch.float32
            assert torch.allclose(secure[part][key], t, rtol=0, atol=1e-6), (part, key)
    one, update = sent[0].tensors["w"], uploads[0].tensors["w"]
    assert one.dtype == torch.int64 and set(sent[0].tensors) == {"w", "b", "running"}
    ring = one.to(torch.float64) / 2.0**62  # uniform on [0, 1): mean 1/2, std 1/√12
    assert abs(float(ring.mean()) - 0.5) < 5 / (12**0.5 * one.numel() ** 0.5)
    r = torch.corrcoef(torch.stack([ring, update.to(torch.float64)]))[0, 1]
    assert abs(float(r)) < 5 / one.numel() ** 0.5
    assert not torch.equal(sent[0].tensors["w"], sent[1].tensors["w"])


def test_dropped_clients_masks_are_recovered_and_too_few_survivors_refuse_the_round() -> None:
    """Two of six clients drop out after the key agreement: the mean of the four that arrived
    (renormalized over them) is recovered; with two of six (t = 4 at threshold 0.5) the round is
    refused in one line."""
    masking = PairwiseMasking()
    ctx = FEDERATION.round(5, (0, 2, 3, 8, 11, 19), (0.1,))
    uploads = [upload_of(client, scale=0.1) for client in ctx.selected]
    sent = [masked(ctx, [masking], upload, {}) for upload in uploads]
    survivors = aggregate(ctx, [masking], sent, {}, senders=4)
    plain = aggregate(ctx, [], uploads[:4], {})
    for key, t in plain[UPDATE].items():
        assert torch.allclose(survivors[UPDATE][key], t, rtol=0, atol=1e-7)
    with pytest.raises(RoundRefused, match=r"^secure aggregation: 2 of the round's 6 .* t=4 "):
        aggregate(ctx, [masking], sent, {}, senders=2)


def test_under_dp_fedavg_the_noise_is_added_to_the_unmasked_clipped_sum() -> None:
    """DP-FedAvg before the masking: each client clips (C = 0.5) and masks with weight 1; the
    server's noiseless result is Σ clipped / E as without masks, and with noise it is that plus
    the same noise (the round's generator)."""
    privacy = DPFedAvg(clip=0.5, noise_multiplier=0.0)
    masking = PairwiseMasking()
    ctx = FEDERATION.round(1, (3, 5, 6), (0.1,))
    for z in (0.0, 1.0):
        state = as_state(
            clip=0.5, noise_multiplier=z, expected=4.0, public_samples=10, public_steps=2
        )
        broadcast = {"privacy": state}
        uploads = [upload_of(client) for client in ctx.selected]
        plain_sent = [masked(ctx, [privacy], upload, broadcast) for upload in uploads]
        plain = aggregate(ctx, [privacy], plain_sent, broadcast)
        sent = [masked(ctx, [privacy, masking], upload, broadcast) for upload in uploads]
        secure = aggregate(ctx, [privacy, masking], sent, broadcast)
        for key, t in plain[UPDATE].items():
            assert torch.allclose(secure[UPDATE][key], t, rtol=0, atol=1e-6)


def test_key_agreement_bytes_are_counted_and_results_match_the_plain_run(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """Through the real loop: every round's accuracy and loss as without masks (to 1e-4: the
    fixed-point sum rounds differently from float32's), the upload 8 bytes per entry plus the
    key agreement for 4 clients, the download larger by the keys and shares received."""
    plain = tmp_path / "plain"
    secure = tmp_path / "secure"
    run_job(make_job([*TINY, "fl.rounds=2"]), plain)
    run_job(make_job([*TINY, "fl.rounds=2", "secure_aggregation=pairwise"]), secure)
    before, after = rows_without_timings(plain), rows_without_timings(secure)
    masking = PairwiseMasking()
    up, down = masking.protocol_bytes(FEDERATION.round(1, (0, 1, 2, 3), (0.1,)), 0)
    for old, new in zip(before, after, strict=True):
        for column in ("test_accuracy", "test_loss", "train_loss"):
            assert float(new[column]) == pytest.approx(float(old[column]), abs=1e-4)
        assert int(new["bytes_up"]) == 2 * int(old["bytes_up"]) + 4 * up
        assert int(new["bytes_down"]) == int(old["bytes_down"]) + 4 * down
        assert float(new["secure_aggregation.saturated"]) == 0


def test_one_worker_and_two_give_the_same_numbers(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """fl.workers=2, exchanging the uploads or each worker's partial ring sums, gives the
    metrics.csv of fl.workers=1, timings aside."""
    args = [*TINY, "fl.rounds=2", "secure_aggregation=pairwise"]
    runs = {"one": [], "two": ["fl.workers=2"], "sums": ["fl.workers=2", "fl.exchange=sums"]}
    for name, extra in runs.items():
        run_job(make_job([*args, *extra]), tmp_path / name)
    one = rows_without_timings(tmp_path / "one")
    assert rows_without_timings(tmp_path / "two") == one
    assert rows_without_timings(tmp_path / "sums") == one
    summary = json.loads((tmp_path / "one" / "summary.json").read_text())
    assert summary["final_accuracy"] > 0.3


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["aggregator=median"], r"^secure_aggregation=pairwise shows .* aggregator=median needs"),
        (["attack=alie", "attack.fraction=0.2"], r"^attack=alie needs each decoded upload"),
        (["upload=[fp16]"], r"^upload=fp16 with secure_aggregation=pairwise: the wire would"),
        (["upload=[topk,fp16]"], r"^upload=topk\+fp16 with .* use upload=\[\]$"),
        (["algo=local"], r"^secure_aggregation=pairwise does not apply to algo=local"),
        (["fl.clients_per_round=1"], r"^fl.clients_per_round=1: secure_aggregation=pairwise"),
        (
            ["secure_aggregation.bits=16", "secure_aggregation.fraction_bits=13"],
            r"^secure_aggregation.bits=16 leaves no room",
        ),
        (["secure_aggregation.bits=63"], r"^secure_aggregation.bits=63 must lie in \[8, 62\]"),
        (
            ["algo=fedbuff", "system=tiers"],
            r"^secure_aggregation=pairwise does not apply to algo=fedbuff: its masks cancel",
        ),
    ],
)
def test_what_needs_each_update_is_refused_in_one_line(
    make_job: Callable[[list[str]], Job], overrides: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as refusal:
        make_job([*TINY, "secure_aggregation=pairwise", *overrides])
    assert "\n" not in str(refusal.value)


def test_the_run_resumes_bit_exactly_with_masks_and_dropouts(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed in round 3 and resumed: metrics.csv as the uninterrupted run's (the masks are the
    derived generators', nothing to checkpoint); clients that fail are dropouts."""
    args = [
        *TINY,
        "secure_aggregation=pairwise",
        "system=tiers",
        "system.dropout=0.3",
        "fl.clients_per_round=6",
    ]
    full, killed = tmp_path / "full", tmp_path / "killed"
    run_job(make_job(args), full)
    run_killed_in_round(make_job(args), killed, 3, monkeypatch)
    run_job(make_job([*args, f"resume={killed}"]), killed)
    assert rows_without_timings(killed) == rows_without_timings(full)


def test_entries_beyond_the_rings_range_are_saturated_and_counted() -> None:
    """bits 24, fraction_bits 16, two clients: each may send magnitudes up to (2^23 − 1) // 2 in
    fixed point, 64 in value; entries of 1,000 (times the weight) are held at that bound, every
    one counted in `secure_aggregation.saturated`, and the unmasked mean is the bound's."""
    masking = PairwiseMasking(bits=24, fraction_bits=16)
    ctx = FEDERATION.round(1, (0, 1), (0.1,))
    uploads = [
        ClientUpload(c, 1, 1, {"w": torch.full((5,), 1000.0), "b": torch.zeros(7)}) for c in (0, 1)
    ]
    sent = [masked(ctx, [masking], upload, {}) for upload in uploads]
    assert ctx.metrics.values["secure_aggregation.saturated"] == 10
    assert sent[0].tensors["w"].dtype == torch.int32  # a 24-bit ring element: 4 bytes
    mean = aggregate(ctx, [masking], sent, {})[UPDATE]["w"]
    bound = ((1 << 23) - 1) // 2 / 2.0**16
    assert torch.allclose(mean, torch.full((5,), bound), atol=2**-16)


def test_a_client_whose_update_is_not_finite_withholds_it_and_drops_out() -> None:
    """One NaN entry of five clients' uploads: that client sends no tensor at all (one NaN must
    not send the other entries in the clear), the server counts it rejected and recovers its
    masks as a dropout's: the round's aggregates are exactly those of the round it dropped."""
    masking = PairwiseMasking()
    ctx = FEDERATION.round(4, (1, 5, 6, 10, 13), (0.1,))
    uploads = [upload_of(client, scale=0.1) for client in ctx.selected]
    uploads[2].tensors["w"][7] = torch.nan
    sent = [masked(ctx, [masking], upload, {}) for upload in uploads]
    assert sent[2].tensors == {}
    assert all(not t.is_floating_point() for upload in sent for t in upload.tensors.values())
    counts = [upload.num_samples for upload in uploads]
    withheld = ServerRound.start(ctx, FedAvg(), [masking], {}, counts)
    dropped = ServerRound.start(ctx, FedAvg(), [masking], {}, counts)
    for index, upload in enumerate(sent):
        withheld.add(upload)
        if index == 2:
            dropped.drop_late(upload.contributor)
        else:
            dropped.add(upload)
    assert withheld.aggregation.rejected == [6]
    expected = dropped.aggregation.results()
    for part, result in withheld.aggregation.results().items():
        for key, t in result.items():
            assert torch.equal(t, expected[part][key]), (part, key)


def test_no_float_upload_reaches_the_server_whatever_the_clients_trained(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """optim.lr=30 on the tiny digits: most clients' updates go non-finite in round 1; every
    upload that reaches the server pipeline (`ServerRound.add`) holds ring elements or
    nothing."""
    seen: list[ClientUpload] = []
    add = ServerRound.add

    def recording(server: ServerRound, encoded: ClientUpload) -> bool:
        seen.append(encoded)
        return add(server, encoded)

    monkeypatch.setattr(ServerRound, "add", recording)
    job = make_job([*TINY, "fl.rounds=2", "secure_aggregation=pairwise", "optim.lr=30"])
    run_job(job, tmp_path)
    floats = [
        upload.client_id
        for upload in seen
        if any(t.is_floating_point() for t in upload.tensors.values())
    ]
    assert floats == []
    assert any(not upload.tensors for upload in seen)  # some withheld a non-finite update


@pytest.mark.parametrize(
    ("kinds", "overrides", "message"),
    [
        (
            {},
            ["privacy._target_=tests.helpers.user_stage.ShiftedPrivacy"],
            r"^privacy=none \(ShiftedPrivacy\) decodes each upload on the server",
        ),
        (
            {"shift": "tests.helpers.user_stage:Shift"},
            [],
            r"^shift=none \(Shift\) decodes each upload",
        ),
    ],
    ids=["built-in kind", "plugged-in kind"],
)
def test_a_stage_that_decodes_on_the_server_before_the_masks_is_refused(
    make_job: Callable[[list[str]], Job], kinds: dict[str, str], overrides: list[str], message: str
) -> None:
    """A stage before secure aggregation whose server side decodes (here: −1 after the client's
    +1) would decode masked ring elements: refused in one line, whether an option of a built-in
    kind or a kind another package plugs in (which runs before secure aggregation)."""
    schema.register_stage_kinds(kinds)
    schema.register_schema()
    try:
        with pytest.raises(ConfigError, match=message) as refusal:
            make_job([*TINY, "secure_aggregation=pairwise", *overrides])
        assert "\n" not in str(refusal.value)
        assert str(refusal.value).endswith("or secure_aggregation=none")
    finally:
        schema.register_stage_kinds()
        schema.register_schema()


def test_a_round_the_server_cannot_unmask_reports_no_clients_training_numbers(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """Two clients a round, each failing with probability 1/2: a round where one delivers is
    refused (t = 2), and the server learns nothing of it, so its row has no training loss and
    none of the values the module logs (`self.log`): they would be that one client's; a round
    both delivered reports them, the two clients' means."""
    args = [
        *TINY,
        "fl.rounds=6",
        "fl.clients_per_round=2",
        "secure_aggregation=pairwise",
        "system=tiers",
        "system.dropout=0.5",
        "model._target_=tests.helpers.lightning_modules.MetricsModule",
    ]
    run_job(make_job(args), tmp_path)
    rows = rows_without_timings(tmp_path)
    logged = ("my_loss", "label_mean", "label_mean_metric", "one")
    refused = [row for row in rows if row.get("aggregation_refused") == "1.0"]
    assert refused
    for row in refused:
        assert row["participants"] == "1.0" and row["train_loss"] == "nan"
        assert [row[name] for name in logged] == [""] * len(logged)
    unmasked = [row for row in rows if row["participants"] == "2.0"]
    assert unmasked
    for row in unmasked:
        assert float(row["one"]) == 1.0 and float(row["my_loss"]) > 0
