"""The final model and the logs leave fedlight in the ecosystem's formats: model.pt (a plain
state_dict) and model.ckpt (a Lightning checkpoint) that score the run's final accuracy,
TensorBoard event files and an MLflow store holding metrics.csv's numbers, and W&B runs named
after the job, with readable group choices and the run's figures as images."""

import csv
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import wandb

from fedlight.core.errors import ConfigError
from fedlight.core.rng import Stream, derive_seed
from fedlight.data.digits import Digits
from fedlight.loggers import base as loggers_base
from fedlight.loggers.base import RunInfo, flat_config, job_name
from fedlight.loggers.mlflow import MLRUNS_DIR
from fedlight.loggers.tensorboard import TENSORBOARD_DIR
from fedlight.loggers.wandb import WandbLogger
from fedlight.models.mlp import MLP
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from fedlight.runs.outputs import write_curves
from fedlight.store.run_files import LIGHTNING_CHECKPOINT_NAME, MODEL_NAME
from tests.conftest import TINY, run_cli, run_killed_in_round
from tests.helpers.named_logs import ODD_NAMES

SMALL = [*TINY, "fl.rounds=2"]
# the options the CLI run below chooses, and its name (its overrides, less the logger's)
CHOSEN = [*SMALL, "algo=scaffold", "partition=shards"]
LOGGERS = ["logger=[csv,wandb,tensorboard,mlflow]", "logger.wandb.mode=offline"]


def read_rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def final_accuracy(run_dir: Path) -> float:
    return json.loads((run_dir / "summary.json").read_text())["final_accuracy"]


def accuracy_on_test_set(module: torch.nn.Module) -> float:
    """The module's argmax accuracy on the digits test set (the whole set in one batch, as the
    run's evaluation batch of 1000 holds it)."""
    data = Digits().load()
    module.eval()
    with torch.no_grad():
        predicted = module(data.prepare(data.test_x)).argmax(dim=1)
    return (predicted == data.test_y).sum().item() / len(data.test_y)


def plain_mlp() -> MLP:
    return MLP(input_shape=(1, 8, 8), num_classes=10, lr=0.05)


def float32(value: float) -> float:
    """`value` as TensorBoard keeps a scalar."""
    return torch.tensor(value, dtype=torch.float32).item()


def tensorboard_scalars(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / TENSORBOARD_DIR))
    events.Reload()
    return [(event.step, event.value) for event in events.Scalars(tag)]


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One run through the real CLI with every logger (W&B offline, MLflow's own store)."""
    tmp_path = tmp_path_factory.mktemp("logged")
    run_dir = tmp_path / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("MLFLOW_TRACKING_URI", raising=False)
        patch.delenv("WANDB_DIR", raising=False)
        run_cli(*CHOSEN, *LOGGERS, f"hydra.run.dir={run_dir}", cwd=tmp_path)
    yield run_dir


# The final model --------------------------------------------------------------------------------


def test_model_pt_and_model_ckpt_load_and_score_the_runs_final_accuracy(logged_run: Path) -> None:
    plain = plain_mlp()
    plain.load_state_dict(torch.load(logged_run / MODEL_NAME))
    from_checkpoint = MLP.load_from_checkpoint(logged_run / LIGHTNING_CHECKPOINT_NAME)
    assert dict(from_checkpoint.hparams) == {
        "input_shape": (1, 8, 8),
        "num_classes": 10,
        "lr": 0.05,
        "momentum": 0.0,
        "weight_decay": 0.0,
    }
    final = final_accuracy(logged_run)
    assert accuracy_on_test_set(plain) == final
    assert accuracy_on_test_set(from_checkpoint) == final
    initial = initial_weights()  # a trained model, not the initial one
    assert all(not torch.equal(plain.state_dict()[k], initial[k]) for k in initial)


@pytest.mark.parametrize("algo", ["central", "ditto"])
def test_the_exported_model_is_the_one_the_run_evaluates(
    make_job: Callable[[list[str]], Job], tmp_path: Path, algo: str
) -> None:
    """`central`'s model is its pooled trainer's (not the server's, which it never changes);
    Ditto's is the global model, whose accuracy the run reports."""
    run_job(make_job([*SMALL, f"algo={algo}"]), tmp_path)
    module = plain_mlp()
    module.load_state_dict(torch.load(tmp_path / MODEL_NAME))
    assert accuracy_on_test_set(module) == final_accuracy(tmp_path)


def initial_weights(seed: int = 0) -> dict[str, torch.Tensor]:
    """The model every run of `seed` starts from (built as the run builds it)."""
    torch.manual_seed(derive_seed(seed, Stream.MODEL_INIT))
    return plain_mlp().state_dict()


@pytest.mark.parametrize(("algo", "kept"), [("fedper", "net.5."), ("local", "")])
def test_a_personalized_runs_model_is_the_shared_one_without_any_clients_own_parts(
    make_job: Callable[[list[str]], Job], tmp_path: Path, algo: str, kept: str
) -> None:
    """FedPer's model.pt holds the trained shared layers and the personal head as initialized
    (each client's own head is its own); `local` trains no shared model: model.pt is the initial
    model."""
    run_job(make_job([*SMALL, f"algo={algo}"]), tmp_path)
    exported, initial = torch.load(tmp_path / MODEL_NAME), initial_weights()
    server = torch.load(tmp_path / "checkpoint.pt", weights_only=True)["server_weights"]
    assert exported.keys() == initial.keys()
    assert all(torch.equal(exported[k], server[k]) for k in exported)
    for name, tensor in exported.items():
        assert torch.equal(tensor, initial[name]) == name.startswith(kept), name


def test_a_user_modules_unpicklable_hyperparameters_cost_model_ckpt_only(
    make_job: Callable[[list[str]], Job], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = "model._target_=tests.helpers.user_module.UnpicklableHparamsModule"
    run_job(make_job([*SMALL, module]), tmp_path)
    assert (tmp_path / MODEL_NAME).is_file() and (tmp_path / "summary.json").is_file()
    assert not (tmp_path / LIGHTNING_CHECKPOINT_NAME).exists()
    assert not (tmp_path / "model.tmp").exists()
    [line] = [x for x in capsys.readouterr().err.splitlines() if LIGHTNING_CHECKPOINT_NAME in x]
    assert line.startswith(
        "fedlight: warning: model.ckpt not written: the module's saved hyperparameters cannot "
        "be pickled ("
    )
    assert "<lambda>" in line and line.endswith("; model.pt holds the model")


def test_a_resumed_runs_model_equals_the_uninterrupted_runs(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    overrides = [*SMALL, "checkpoint.every=1"]
    run_job(make_job(overrides), tmp_path / "full")
    run_killed_in_round(make_job(overrides), tmp_path / "killed", 2, monkeypatch)
    assert not (tmp_path / "killed" / MODEL_NAME).exists()  # written when the run ends
    run_job(make_job([*overrides, f"resume={tmp_path / 'killed'}"]), tmp_path / "resumed")
    for name in (MODEL_NAME, LIGHTNING_CHECKPOINT_NAME):
        full = torch.load(tmp_path / "full" / name, weights_only=True)
        resumed = torch.load(tmp_path / "resumed" / name, weights_only=True)
        if name == LIGHTNING_CHECKPOINT_NAME:
            assert full.keys() == resumed.keys()
            assert full["hyper_parameters"] == resumed["hyper_parameters"]
            full, resumed = full["state_dict"], resumed["state_dict"]
        assert full.keys() == resumed.keys()
        assert all(torch.equal(full[k], resumed[k]) for k in full)


# TensorBoard ------------------------------------------------------------------------------------


def test_tensorboard_events_hold_each_evaluated_rounds_metrics_and_the_config(
    logged_run: Path,
) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    rows = read_rows(logged_run)
    for column in ("test_accuracy", "test_loss", "bytes_up", "participants"):
        logged = tensorboard_scalars(logged_run, column)
        expected = [(int(r["round"]), float(r[column])) for r in rows]
        assert [step for step, _ in logged] == [step for step, _ in expected]
        assert [v for _, v in logged] == [float32(value) for _, value in expected]
    events = EventAccumulator(str(logged_run / TENSORBOARD_DIR))
    events.Reload()
    content = events.PluginTagToContent("hparams")
    session = plugin_data_pb2.HParamsPluginData.FromString(
        content["_hparams_/session_start_info"]
    ).session_start_info
    assert session.hparams["algo"].string_value == "scaffold"
    assert session.hparams["partition"].string_value == "shards"
    assert session.hparams["fl.rounds"].number_value == 2
    assert not any("_target_" in key for key in session.hparams)


def test_a_run_resumed_in_place_replays_its_rounds_into_tensorboard_once(
    make_job: Callable[[list[str]], Job], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    overrides = [*SMALL, "checkpoint.every=1", "logger=tensorboard"]
    run_dir = tmp_path / "run"
    run_killed_in_round(make_job(overrides), run_dir, 2, monkeypatch)
    assert [step for step, _ in tensorboard_scalars(run_dir, "test_accuracy")] == [1]
    run_job(make_job([*overrides, f"resume={run_dir}"]), run_dir)
    rows = read_rows(run_dir)
    assert [int(r["round"]) for r in rows] == [1, 2]
    assert tensorboard_scalars(run_dir, "test_accuracy") == [
        (int(r["round"]), float32(float(r["test_accuracy"]))) for r in rows
    ]


# MLflow -----------------------------------------------------------------------------------------


def test_mlflow_store_holds_the_metrics_the_config_and_the_jobs_name(
    logged_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # as the run had it (MLflow 3's opt-in)
    client = MlflowClient((logged_run / MLRUNS_DIR).as_uri())
    experiment = client.get_experiment_by_name("fedlight")
    [run] = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == ",".join(CHOSEN)
    assert run.info.status == "FINISHED"
    assert run.data.params["algo"] == "scaffold" and run.data.params["fl.rounds"] == "2"
    assert run.data.tags["partition"] == "shards"
    assert not any("_target_" in key for key in run.data.params)
    rows = read_rows(logged_run)
    for column in ("test_accuracy", "train_loss", "bytes_down"):
        history = client.get_metric_history(run.info.run_id, column)
        logged = sorted((metric.step, metric.value) for metric in history)
        assert logged == [(int(r["round"]), float(r[column])) for r in rows]


def test_names_mlflow_refuses_are_logged_as_plain_paths_and_the_run_finishes(
    make_job: Callable[[list[str]], Job],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Probe W8: a test_step that logs `../../escape` failed the run after its first round
    (MLflow refuses the name); it is logged as `_/_/escape`, said once, and nothing is written
    outside the run's store."""
    from mlflow.tracking import MlflowClient

    run_dir = tmp_path / "a" / "b" / "run"
    module = "model._target_=tests.helpers.named_logs.OddNames"
    run_job(make_job([*TINY, "fl.rounds=2", "logger=[csv,mlflow]", module]), run_dir)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient((run_dir / MLRUNS_DIR).as_uri())
    [run] = client.search_runs([client.get_experiment_by_name("fedlight").experiment_id])
    assert {"_/_/escape", "a/b", "c", "top1", "test_accuracy"} <= set(run.data.metrics)
    assert [p for p in tmp_path.rglob("*escape*") if run_dir / MLRUNS_DIR not in p.parents] == []
    said = [line for line in capsys.readouterr().err.splitlines() if "logger=mlflow" in line]
    assert len(said) == len(ODD_NAMES)  # each renamed name once, over both rounds
    assert "metric '../../escape' is logged as '_/_/escape'" in said[0]


def test_a_logger_whose_package_is_missing_is_refused_naming_the_extra(
    make_job: Callable[[list[str]], Job], monkeypatch: pytest.MonkeyPatch
) -> None:
    find_spec = loggers_base.importlib.util.find_spec
    missing = {"mlflow", "tensorboard"}
    monkeypatch.setattr(
        loggers_base.importlib.util,
        "find_spec",
        lambda name, *args: None if name in missing else find_spec(name, *args),
    )
    for option in ("mlflow", "tensorboard"):
        with pytest.raises(ConfigError) as refused:
            make_job([*SMALL, f"logger={option}"])
        assert str(refused.value) == (
            f"logger={option} needs the {option} package, which is not installed; install it "
            f"with pip install 'fedlight[{option}]'"
        )


# W&B --------------------------------------------------------------------------------------------


def test_a_wandb_offline_run_is_named_after_the_job_with_readable_choices_and_figures(
    logged_run: Path,
) -> None:
    [offline] = (logged_run / "wandb").glob("offline-run-*")
    # The offline run log holds the run's name and each config value as JSON text.
    record_log = next(offline.glob("run-*.wandb")).read_bytes()
    assert ",".join(CHOSEN).encode() in record_log
    assert b'\n\x04algo\x82\x01\n"scaffold"' in record_log  # key algo, value_json "scaffold"
    assert b"_target_" not in record_log and b"fedlight.algorithms" not in record_log
    images = offline / "files" / "media" / "images" / "figures"
    drawn = sorted(path.name.partition("_2_")[0] for path in images.glob("*.png"))
    assert drawn == ["curves", "label_histogram", "participation"]  # logged at round 2
    assert all(path.read_bytes()[:4] == b"\x89PNG" for path in images.glob("*.png"))


class FakeRun:
    def __init__(self) -> None:
        self.logged: list[dict[str, Any]] = []
        self.summary: dict[str, Any] = {}

    def log(self, data: dict[str, Any], step: int | None = None) -> None:
        self.logged.append(data)

    def finish(self) -> None:
        pass


def test_wandb_takes_the_jobs_name_unless_logger_wandb_name_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(wandb, "init", lambda **kwargs: calls.append(kwargs) or FakeRun())
    config = {"algo": {"_target_": "fedlight.algorithms.scaffold.Scaffold", "lr": 1.0}}
    run = RunInfo(tmp_path, config, {"algo": "scaffold"}, None, 2, "algo=scaffold,seed=1")
    WandbLogger(mode="offline").start(run)
    WandbLogger(mode="offline", name="mine").start(run)
    assert [call["name"] for call in calls] == ["algo=scaffold,seed=1", "mine"]
    assert calls[0]["config"] == {"algo": "scaffold", "algo.lr": 1.0}


def test_wandb_logs_the_figures_the_run_drew_as_images(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeRun()
    monkeypatch.setattr(wandb, "init", lambda **kwargs: fake)
    write_curves(tmp_path, [{"round": 1, "test_accuracy": 0.5, "test_loss": 1, "train_loss": 1}])
    logger = WandbLogger(mode="offline")
    logger.start(RunInfo(tmp_path, {}, {}, None, 1))
    logger.finish({"final_accuracy": 0.5})
    [images] = fake.logged
    assert list(images) == ["figures/curves"]
    assert isinstance(images["figures/curves"], wandb.Image)
    assert fake.summary == {"final_accuracy": 0.5}


# Names and hyperparameters ----------------------------------------------------------------------


def test_a_jobs_name_is_its_overrides_less_where_and_how_it_is_written(tmp_path: Path) -> None:
    run_dir = tmp_path / "2024-05-01" / "12-00-00"
    overrides = ["algo=scaffold", "logger=wandb", "logger.wandb.tags=[a]", "+seed=1"]
    assert job_name([*overrides, f"resume={run_dir}", "overwrite=true"], run_dir) == (
        "algo=scaffold,+seed=1"
    )
    assert job_name(["hydra.run.dir=x", "logger=mlflow"], run_dir) == "2024-05-01/12-00-00"


def test_the_config_is_flat_with_each_group_as_its_options_name() -> None:
    config = {
        "seed": 0,
        "fl": {"rounds": 5},
        "algo": {"_target_": "fedlight.algorithms.fedprox.FedProx", "mu": 0.01},
        "model": {"_target_": "fedlight.models.mlp.MLP", "_partial_": True, "lr": 0.1},
        "upload": {"topk": {"_target_": "x.TopK", "ratio": 0.1}, "fp16": {"_target_": "x.FP16"}},
    }
    choices = {"algo": "fedprox", "model": "mlp", "upload": "topk+fp16"}
    assert flat_config(config, choices) == {
        "algo": "fedprox",
        "model": "mlp",
        "upload": "topk+fp16",
        "seed": 0,
        "fl.rounds": 5,
        "algo.mu": 0.01,
        "model.lr": 0.1,
        "upload.topk.ratio": 0.1,
    }
