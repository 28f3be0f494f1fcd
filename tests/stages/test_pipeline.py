"""The round as a pipeline of stages: an injected server optimizer against hand arithmetic, the
wire (exact bytes, decoded values, per-client transform state resumed bit-exactly), the metrics
channel (metrics.csv, W&B, summary.json), evaluation by a user's own step, refusals of nonsense
combinations, and what several workers exchange."""

import csv
import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import wandb

from fedlight.algorithms.fedprox import FedProx, ProximalTerm
from fedlight.core.context import Federation, RoundContext
from fedlight.core.errors import ConfigError
from fedlight.core.messages import ClientUpload
from fedlight.core.rng import Stream, derive_seed
from fedlight.core.settings import FLSettings, RunSettings
from fedlight.core.tensors import StateDict, nbytes
from fedlight.data.digits import Digits
from fedlight.drivers.base import Clients
from fedlight.drivers.synchronous import FederatedLoop
from fedlight.loggers.base import METRIC_COLUMNS, is_timing
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from fedlight.runs.launch import spawn_workers
from fedlight.server_opt.adam import Adam
from fedlight.stages.wire.base import DOWNLOAD, UPLOAD, Payload, Wire, WireTransform
from fedlight.stages.wire.bf16 import BF16
from fedlight.stages.wire.fp16 import FP16
from fedlight.store.checkpoint import load_checkpoint
from tests.algorithms.test_algorithms import one_torch_thread, record_uploads  # noqa: F401 - autouse fixture
from tests.conftest import TINY, rows_without_timings, run_killed_in_round
from tests.helpers import worker_targets
from tests.helpers.commands import validate_command_line


def build_loop(job: Job) -> FederatedLoop:
    data = Digits().load()
    torch.manual_seed(derive_seed(job.settings.seed, Stream.MODEL_INIT))
    module = job.model(input_shape=data.input_shape, num_classes=data.num_classes)
    labels = data.train_y.numpy()
    import numpy as np

    sets = job.partition(labels, job.settings.fl.num_clients, np.random.default_rng(0))
    indices = [torch.as_tensor(s, dtype=torch.int64) for s in sets]
    return FederatedLoop(job.settings, Clients(data, indices), module, job.stages)


def read_rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


# The server optimizer is a stage of its own ------------------------------------------------------


def test_fedprox_with_an_adam_server_matches_hand_arithmetic_for_two_rounds(
    make_job: Callable[[list[str]], Job],
) -> None:
    """x_{t+1} = x_t + η m_t/(√v_t + τ), m_t = β1 m + (1 − β1) Δ_t, v_t = β2 v + (1 − β2) Δ_t²,
    Δ_t the sample-weighted mean of the FedProx clients' deltas; in float64 by hand."""
    job = make_job([*TINY, "algo=fedprox", "algo.mu=0.1", "server_opt=adam", "server_opt.lr=0.05"])
    algorithm = job.algorithm
    assert isinstance(algorithm, FedProx) and isinstance(algorithm.server_opt, Adam)
    uploads = record_uploads(job)
    loop = build_loop(job)
    x = {name: t.double() for name, t in loop.server.weights.items()}
    m = {name: torch.zeros_like(t) for name, t in x.items()}
    v = {name: torch.full_like(t, 1e-3**2) for name, t in x.items()}
    for round_index in (1, 2):
        ctx = loop.federation.round(round_index)
        callbacks = algorithm.local_callbacks(ctx, loop.server.weights, None)
        assert [type(c) for c in callbacks] == [ProximalTerm] and callbacks[0].mu == 0.1
        loop.run_round(round_index)
        total = sum(u.num_samples for u in uploads[round_index - 1])
        for name in x:
            delta = sum(
                u.tensors[name].double() * u.num_samples / total for u in uploads[round_index - 1]
            )
            m[name] = 0.9 * m[name] + 0.1 * delta
            v[name] = 0.99 * v[name] + 0.01 * delta * delta
            x[name] = x[name] + 0.05 * m[name] / (v[name].sqrt() + 1e-3)
            assert torch.allclose(loop.server.weights[name].double(), x[name], rtol=0, atol=1e-6)
            assert torch.allclose(loop.server.extras[f"v/{name}"].double(), v[name], atol=1e-9)
    assert {u.client_id for u in uploads[0]} != {u.client_id for u in uploads[1]}


def test_scaffold_with_server_momentum_runs_and_keeps_its_controls(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    job = make_job([*TINY, "algo=scaffold", "server_opt=momentum", "fl.rounds=2"])
    run_job(job, tmp_path / "run")
    extras = load_checkpoint(tmp_path / "run" / "checkpoint.pt")["server_extras"]
    assert any(k.startswith("control/") for k in extras) and any(k.startswith("m/") for k in extras)
    plain = make_job([*TINY, "algo=scaffold", "fl.rounds=2"])
    run_job(plain, tmp_path / "plain")
    assert rows_without_timings(tmp_path / "run") != rows_without_timings(tmp_path / "plain")


def test_the_shortcut_algorithms_equal_fedavg_with_their_server_optimizer(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    run_job(make_job([*TINY, "fl.rounds=2", "algo=fedadam"]), tmp_path / "shortcut")
    run_job(make_job([*TINY, "fl.rounds=2", "server_opt=adam"]), tmp_path / "composed")
    assert rows_without_timings(tmp_path / "shortcut") == rows_without_timings(
        tmp_path / "composed"
    )


# The wire ---------------------------------------------------------------------------------------


def test_fp16_uploads_halve_the_bytes_exactly_and_arrive_as_the_cast(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    run_job(make_job([*TINY, "fl.rounds=2"]), tmp_path / "plain")
    job = make_job([*TINY, "fl.rounds=2", "upload=[fp16]"])
    sent = record_uploads(job)
    received: list[ClientUpload] = []
    split = job.algorithm.split

    def recording_split(ctx: RoundContext, upload: ClientUpload) -> dict[str, StateDict]:
        received.append(upload)
        return split(ctx, upload)

    job.algorithm.split = recording_split  # type: ignore[method-assign]
    run_job(job, tmp_path / "fp16")
    plain, half = read_rows(tmp_path / "plain"), read_rows(tmp_path / "fp16")
    for p, h in zip(plain, half, strict=True):
        assert int(h["bytes_up"]) * 2 == int(p["bytes_up"])
        assert h["bytes_down"] == p["bytes_down"]
    # The server aggregates exactly the float16 values, back in float32.
    originals = [u for uploads in sent for u in uploads]
    assert len(received) == len(originals) == 8
    for original, arrived in zip(originals, received, strict=True):
        for name, t in original.tensors.items():
            assert arrived.tensors[name].dtype == torch.float32
            assert torch.equal(arrived.tensors[name], t.half().float())
    assert rows_without_timings(tmp_path / "plain") != rows_without_timings(tmp_path / "fp16")


def test_error_feedback_carries_the_rounding_error_to_the_next_upload() -> None:
    cast = FP16(error_feedback=True)
    ctx = Federation(num_clients=1, trainable=frozenset()).round(1)
    value = torch.tensor([1.0 + 2**-11, 3.0], dtype=torch.float32)  # float16 steps by 2⁻¹⁰ at 1
    payload, state = cast.encode(ctx, 0, Payload({"w": value}), None)
    assert payload["w"].dtype == torch.float16 and state is not None
    assert torch.equal(state["w"], value - payload["w"].float())
    assert payload["w"][0].item() == 1.0 and state["w"][0].item() == 2**-11
    again, state = cast.encode(ctx, 0, Payload({"w": value}), state)
    # The second message carries value + residual: 1 + 2⁻¹⁰, which float16 holds exactly.
    assert again["w"][0].item() == 1 + 2**-10 and state["w"][0].item() == 0.0
    decoded, _ = cast.decode(ctx, 0, again, None)
    assert decoded["w"].dtype == torch.float32


@pytest.mark.parametrize("cast", [FP16(), BF16()], ids=["fp16", "bf16"])
@pytest.mark.parametrize("direction", [UPLOAD, DOWNLOAD])
def test_a_cast_decodes_only_what_it_encoded(cast: FP16 | BF16, direction: str) -> None:
    """A model's own buffer of the cast's dtype, which the sender leaves as it is, arrives in its
    own dtype, not as float32; the float32 entries arrive as the cast, and the mark that tells
    them apart costs no byte."""
    ctx = Federation(num_clients=1, trainable=frozenset()).round(1)
    tensors = {
        "w": torch.tensor([1.0 + 2**-11, 3.0]),
        "own": torch.tensor([0.5, -2.0, 7.0], dtype=cast.dtype),
        "steps": torch.tensor(4),
    }
    wire = Wire(**{direction: {"cast": cast}})
    payload, _ = wire.send(direction, ctx, 0, tensors, {})
    assert nbytes(payload) == 2 * 2 + 3 * 2 + 8
    decoded, _ = wire.receive(direction, ctx, 0, payload, {})
    assert list(decoded) == list(tensors)
    assert decoded["own"].dtype == cast.dtype and torch.equal(decoded["own"], tensors["own"])
    assert decoded["w"].dtype == torch.float32
    assert torch.equal(decoded["w"], tensors["w"].to(cast.dtype).float())
    assert torch.equal(decoded["steps"], tensors["steps"])


def test_the_same_run_twice_differs_only_in_what_fedlight_calls_timings(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """Measured time differs between runs that are otherwise bit-identical: `is_timing` names
    each such column, the wire's encode and decode seconds among them, and not the numbers of
    the virtual clock."""
    overrides = [*TINY, "fl.rounds=2", "upload=[fp16]", "download=[fp16]"]
    run_job(make_job(overrides), tmp_path / "first")
    run_job(make_job(overrides), tmp_path / "second")
    first, second = read_rows(tmp_path / "first"), read_rows(tmp_path / "second")
    timings = {column for column in first[0] if is_timing(column)}
    assert timings == {
        "wall_seconds",
        "client_seconds",
        *(f"wire.{d}.{s}_seconds" for d in (UPLOAD, DOWNLOAD) for s in ("encode", "decode")),
    }
    differing = {c for a, b in zip(first, second, strict=True) for c in a if a[c] != b[c]}
    assert differing <= timings
    assert not is_timing("round_seconds") and not is_timing("virtual_time")


def test_a_transform_with_client_state_resumes_bit_exactly(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for store in ("memory", "disk"):
        overrides = [
            *TINY,
            "algo=scaffold",
            "upload=[fp16]",
            "upload.fp16.error_feedback=true",
            f"fl.client_state={store}",
            "fl.rounds=4",
            "checkpoint.every=2",
        ]
        full, killed = tmp_path / f"{store}-full", tmp_path / f"{store}-killed"
        run_job(make_job(overrides), full)
        run_killed_in_round(make_job(overrides), killed, 4, monkeypatch)
        run_job(make_job([*overrides, f"resume={killed}"]), tmp_path / f"{store}-resumed")
        assert rows_without_timings(tmp_path / f"{store}-resumed") == rows_without_timings(full)
        first = load_checkpoint(full / "checkpoint.pt")
        second = load_checkpoint(tmp_path / f"{store}-resumed" / "checkpoint.pt")
        for part in ("server_weights", "server_extras"):
            assert all(torch.equal(first[part][k], second[part][k]) for k in first[part])
        if store == "memory":
            states = first["client_states"]
            keys = {k for state in states.values() for k in state}
            assert any(k.startswith("wire/upload.fp16/") for k in keys)  # its own namespace
            assert any("/" not in k for k in keys)  # SCAFFOLD's c_i beside it
            for client, state in states.items():
                assert all(
                    torch.equal(t, second["client_states"][client][k]) for k, t in state.items()
                )


def test_a_download_transform_cannot_keep_sender_state() -> None:
    with pytest.raises(ConfigError, match=r"^wire.download.fp16 keeps sender state"):
        Wire(download={"fp16": FP16(error_feedback=True)})


class Tagging(WireTransform):
    """Appends its tag to a log when it encodes and decodes, and marks the payload."""

    def __init__(self, tag: str, log: list[str]) -> None:
        self.tag, self.log = tag, log

    def encode(
        self, ctx: RoundContext, client: int, tensors: Payload, state: StateDict | None
    ) -> tuple[Payload, StateDict | None]:
        self.log.append(f"encode {self.tag}")
        return Payload({**tensors, self.tag: torch.zeros(1)}, tensors.metadata), None

    def decode(
        self, ctx: RoundContext, client: int, payload: StateDict, state: StateDict | None
    ) -> tuple[StateDict, StateDict | None]:
        self.log.append(f"decode {self.tag}")
        assert list(payload)[-1] == self.tag  # the last transform's mark comes off first
        return {k: t for k, t in payload.items() if k != self.tag}, None


def test_the_chains_decode_in_reverse_order() -> None:
    log: list[str] = []
    wire = Wire(upload={"a": Tagging("a", log), "b": Tagging("b", log)})
    ctx = Federation(num_clients=1, trainable=frozenset()).round(1)
    payload, _ = wire.send(UPLOAD, ctx, 0, {"w": torch.ones(2)}, {})
    assert list(payload) == ["w", "a", "b"]
    decoded, _ = wire.receive(UPLOAD, ctx, 0, payload, {})
    assert list(decoded) == ["w"]
    assert log == ["encode a", "encode b", "decode b", "decode a"]


# The metrics channel ---------------------------------------------------------------------------


def test_a_stage_reported_metric_reaches_metrics_csv_wandb_and_summary(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_root"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_job(make_job([*TINY, "fl.rounds=2", "upload=[fp16]", "logger=wandb"]), tmp_path / "run")
    wandb.teardown()
    rows = read_rows(tmp_path / "run")
    name = "wire.float16.sq_error"
    # the fixed columns, then the reported ones in sorted order (the loop's and the upload
    # chain's timings among them)
    timings = ["wire.upload.decode_seconds", "wire.upload.encode_seconds"]
    reported = sorted([name, "participants", "rejected", *timings])
    assert list(rows[0]) == [*METRIC_COLUMNS, *reported]
    errors = [float(row[name]) for row in rows]
    assert all(0 < e < 1e-3 for e in errors)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary[name] == errors[-1]
    [run] = (tmp_path / "wandb_root" / "wandb").glob("offline-run-*")
    record_log = next(run.glob("run-*.wandb")).read_bytes()
    assert name.encode() in record_log
    assert json.dumps(errors[-1]).encode() in record_log


def test_a_metric_first_reported_later_widens_the_header_of_metrics_csv(tmp_path: Path) -> None:
    from fedlight.loggers.base import RunInfo
    from fedlight.loggers.csv import CSVLogger

    logger = CSVLogger()
    logger.start(RunInfo(tmp_path, {}, {}, None, 3))
    base = dict.fromkeys(METRIC_COLUMNS, 1)
    logger.log_round(base)
    logger.log_round({**base, "zeta": 2.0, "alpha": 3.0})
    logger.log_round({**base, "alpha": 4.0})
    logger.finish({})
    rows = read_rows(tmp_path)
    assert list(rows[0]) == [*METRIC_COLUMNS, "zeta", "alpha"]
    assert [(r["zeta"], r["alpha"]) for r in rows] == [("", ""), ("2.0", "3.0"), ("", "4.0")]


# Evaluation as a stage ----------------------------------------------------------------------------


def test_a_modules_own_test_step_evaluates_the_model(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    job = make_job(
        [*TINY, "fl.rounds=2", "model._target_=tests.helpers.user_module.EvaluatingModule"]
    )
    run_job(job, tmp_path / "run")
    rows = read_rows(tmp_path / "run")
    assert list(rows[0]) == [*METRIC_COLUMNS, "mean_max_logit", "participants", "rejected"]
    # Top-2 accuracy by hand on the final model, in the module's own batches of eval.batch_size.
    from tests.helpers.user_module import EvaluatingModule

    data = Digits().load()
    module = EvaluatingModule(data.input_shape, data.num_classes)
    module.load_state_dict(load_checkpoint(tmp_path / "run" / "checkpoint.pt")["server_weights"])
    with torch.no_grad():
        logits = module(data.prepare(data.test_x))
    top2 = (logits.topk(2, dim=1).indices == data.test_y.unsqueeze(1)).any(dim=1)
    argmax = (logits.argmax(dim=1) == data.test_y).double().mean().item()
    assert float(rows[-1]["test_accuracy"]) == pytest.approx(top2.double().mean().item(), 1e-6)
    assert float(rows[-1]["test_accuracy"]) > argmax
    expected_margin = logits.max(dim=1).values.double().mean().item()
    assert float(rows[-1]["mean_max_logit"]) == pytest.approx(expected_margin, rel=1e-5)
    assert math.isfinite(float(rows[-1]["test_loss"]))  # not reported: cross-entropy as usual


# Refusals ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["algo=fedadam", "server_opt=momentum"],
            "server_opt=momentum (or its settings) does not apply to algo=fedadam: it is FedAvg "
            "with its own server optimizer; use algo=fedavg server_opt=<option>",
        ),
        (
            ["algo=local", "server_opt=adam"],
            "server_opt=adam (or its settings) does not apply to algo=local: it trains no global",
        ),
        (
            ["algo=central", "aggregator.weighting=uniform"],
            "aggregator=mean (or its settings) does not apply to algo=central",
        ),
        (["aggregator.weighting=median"], "aggregator.weighting=median is not a weighting"),
        (["server_opt=adam", "server_opt.beta1=1.0"], "server_opt.beta1=1.0 must be in [0, 1)"),
        (["server_opt.lr=0"], "server_opt.lr=0 must be > 0"),
        (
            ["upload=[nope]"],
            "upload=nope is not an option; choose upload from: bf16, fp16, int8, qsgd, randk,",
        ),
        (
            ["upload=[fp16]", "download=[fp16]", "download.fp16.error_feedback=true"],
            "download.fp16.error_feedback=true: the server sends one model to all clients",
        ),
        (["fl.exchange=all"], "fl.exchange=all is not an exchange"),
        (["algo.server_lr=0.5"], "unknown key algo.server_lr; algo has:"),
    ],
)
def test_nonsense_combinations_are_refused_in_one_line(args: list[str], expected: str) -> None:
    with pytest.raises(ConfigError) as error:
        validate_command_line([*TINY, *args])
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(expected), message


# What several workers exchange -------------------------------------------------------------------


def test_workers_exchanging_partial_sums_agree_with_one_worker_to_rounding(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    """fl.exchange=sums: each of 2 workers reduces its share; the clients' training, bytes and
    client states are those of 1 worker exactly, the server's sums to float rounding."""
    base = [*TINY, "fl.rounds=2", "partition=dirichlet", "fl.clients_per_round=6"]
    algos = {"fedavg": [], "scaffold": ["algo=scaffold", "optim.momentum=0.9"]}
    runs = [
        (make_job([*base, *o, "fl.workers=2", "fl.exchange=sums"]), tmp_path / f"{n}-2", None)
        for n, o in algos.items()
    ]
    group = RunSettings(fl=FLSettings(workers=2, threads_per_worker=1), device="cpu")
    spawn_workers(group, worker_targets.run_jobs, (runs,), (ConfigError,))
    for name, overrides in algos.items():
        run_job(make_job([*base, *overrides]), tmp_path / f"{name}-1")
        one, two = (read_rows(tmp_path / f"{name}-{n}") for n in (1, 2))
        assert [r["bytes_up"] for r in one] == [r["bytes_up"] for r in two]
        assert one[0]["train_loss"] == two[0]["train_loss"]  # round 1 trains from the same x
        for a, b in zip(one, two, strict=True):
            assert float(a["test_loss"]) == pytest.approx(float(b["test_loss"]), rel=1e-5)
        w1 = load_checkpoint(tmp_path / f"{name}-1" / "checkpoint.pt")["server_weights"]
        w2 = load_checkpoint(tmp_path / f"{name}-2" / "checkpoint.pt")["server_weights"]
        assert all(torch.allclose(w1[k], w2[k], rtol=1e-5, atol=1e-6) for k in w1)


def test_fedlight_report_tabulates_a_stage_reported_metric(tmp_path: Path) -> None:
    from fedlight.reports.cli import main as report_main
    from tests.conftest import run_cli

    sweep = tmp_path / "sweep"
    run_cli(
        "-m",
        *TINY,
        "fl.rounds=2",
        "upload=[fp16]",
        "seed=0,1",
        f"hydra.sweep.dir={sweep}",
        cwd=tmp_path,
    )
    name = "wire.float16.sq_error"
    assert report_main([str(sweep), "--metrics", name]) == 0
    finals = [json.loads((sweep / job / "summary.json").read_text())[name] for job in ("0", "1")]
    with (sweep / "report.csv").open() as f:
        [row] = list(csv.DictReader(f))
    assert float(row[f"{name}_mean"]) == pytest.approx(sum(finals) / 2)
    assert name in (sweep / "report.md").read_text()


def test_a_run_with_every_stage_kind_at_once_resumes_bit_exactly(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attack, DP-FedAvg, top-k with error feedback and an fp16 cast with error feedback, with
    the disk client store: killed in round 4 and resumed, every number and every stage's state
    (server: the privacy accountant's; clients: the wire's residuals) is the uninterrupted
    run's, and a checkpoint of the layout before the pipelines is refused in one line."""
    overrides = [
        *TINY,
        "fl.rounds=5",
        "selection=poisson",
        "privacy=dp_fedavg",
        "privacy.noise_multiplier=0.5",
        "attack=sign_flip",
        "attack.fraction=0.2",
        "upload=[topk,fp16]",
        "upload.fp16.error_feedback=true",
        "fl.client_state=disk",
    ]
    run_job(make_job(overrides), tmp_path / "full")
    run_killed_in_round(make_job(overrides), tmp_path / "killed", 4, monkeypatch)
    run_job(make_job([*overrides, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    rows = rows_without_timings(tmp_path / "full")
    assert rows_without_timings(tmp_path / "resumed") == rows
    assert any(float(row["malicious"]) > 0 for row in rows)
    first = load_checkpoint(tmp_path / "full" / "checkpoint.pt")
    second = load_checkpoint(tmp_path / "resumed" / "checkpoint.pt")
    for name, weight in first["server_weights"].items():
        assert torch.equal(second["server_weights"][name], weight)
    chain = {"selection", "attack", "privacy", "secure_aggregation", "wire"}
    assert set(first["stage_states"]) == chain
    for stage, state in first["stage_states"].items():
        assert all(torch.equal(second["stage_states"][stage][k], t) for k, t in state.items())
    residuals = [
        torch.load(path, weights_only=True)
        for path in (tmp_path / "full" / "client_states").rglob("*.pt")
    ]
    keys = {key for state in residuals for key in state}
    assert any(k.startswith("wire/upload.topk/") for k in keys)
    assert any(k.startswith("wire/upload.fp16/") for k in keys)
    old = dict(first)
    old.pop("state_format")
    old.pop("stage_states")
    torch.save(old, tmp_path / "killed" / "checkpoint.pt")
    refusal = r"lacks stage_states, state_format \(written by an older fedlight"
    with pytest.raises(ConfigError, match=refusal):
        run_job(make_job([*overrides, f"resume={tmp_path / 'killed'}"]), tmp_path / "refused")
