"""Every option of every group composes and instantiates; bad settings fail with one line."""

from pathlib import Path

import pytest
import torch

from fedlight.cli.schema import CONF_DIR, CONFIG_GROUPS
from fedlight.cli.validate import group_options
from fedlight.core.errors import ConfigError
from fedlight.runs.job import Job
from tests.helpers.commands import validate_command_line

# 3 clients of digits examples
OWN_SPLITS = Path(__file__).parents[1] / "helpers" / "own_splits.json"
# What an option needs besides itself (it refuses to run without, in one line; tested elsewhere).
COMPANIONS = {
    "data=torch_dataset": ["data.dataset=tests.helpers.own_data.Writers"],
    "data=datamodule": ["data.datamodule=tests.helpers.own_data.WritersData"],
    "partition=natural": [
        "data=torch_dataset",
        "data.dataset=tests.helpers.own_data.Writers",
        "data.client_key=writers",
        "fl.clients_per_round=2",
    ],
    "partition=from_file": [f"partition.path={OWN_SPLITS}", "fl.clients_per_round=2"],
    "partition=callable": ["partition.function=tests.helpers.own_data.random_parts"],
    "privacy=dp_fedavg": ["selection=poisson"],
    "privacy=adaptive_clip": ["selection=poisson"],
    "algo=fedasync": ["system=homogeneous"],
    "algo=fedbuff": ["system=homogeneous"],
    # the folder or saved dataset is read when the data loads, not when the job is built
    "data=leaf": ["data.root=leaf/data/synthetic/data"],
    "data=leaf_femnist": ["data.root=leaf/data/femnist/data"],
    "data=leaf_shakespeare": ["data.root=leaf/data/shakespeare/data"],
    "data=huggingface": ["data.path=data/femnist"],
    "local_work=stragglers": ["local.epochs=2"],
}
MODEL_INPUT = {
    "mlp": (1, 8, 8),
    "cnn": (1, 8, 8),
    "cifar_cnn": (3, 32, 32),
    "simple_cnn": (1, 28, 28),
    "femnist_cnn": (1, 28, 28),
    "logistic": (1, 8, 8),
    "stacked_lstm": (80,),
    "pfl_cnn": (3, 32, 32),
}
MODEL_INPUT_TYPE = {"stacked_lstm": torch.int64}  # character indices


def test_every_group_has_its_documented_options() -> None:
    assert set(group_options("algo")) >= {"fedavg"}
    assert set(group_options("data")) == {
        "digits",
        "mnist",
        "fmnist",
        "cifar10",
        "torch_dataset",
        "datamodule",
        "leaf",
        "leaf_femnist",
        "leaf_shakespeare",
        "huggingface",
        "synthetic",
        "fedprox_mnist",
    }
    assert set(group_options("model")) == {
        "mlp",
        "cnn",
        "cifar_cnn",
        "simple_cnn",
        "femnist_cnn",
        "stacked_lstm",
        "logistic",
        "pfl_cnn",
    }
    assert set(group_options("partition")) == {
        "iid",
        "shards",
        "dirichlet",
        "label_quantity",
        "label_blocks",
        "natural",
        "from_file",
        "callable",
    }
    assert set(group_options("selection")) >= {"random"}
    assert set(group_options("lr_schedule")) >= {"constant"}
    assert set(group_options("logger")) == {"csv", "wandb", "tensorboard", "mlflow"}


@pytest.mark.parametrize(
    ("group", "option"),
    [(g, o) for g in CONFIG_GROUPS for o in group_options(g)],
)
def test_every_option_composes_and_instantiates(make_job, group: str, option: str) -> None:
    job = make_job([f"{group}={option}", *COMPANIONS.get(f"{group}={option}", [])])
    assert job.choices[group] == option
    if group == "model":
        module = job.model(input_shape=MODEL_INPUT[option], num_classes=10)
        inputs = torch.zeros(2, *MODEL_INPUT[option], dtype=MODEL_INPUT_TYPE.get(option))
        logits = module(inputs)
        assert logits.shape == (2, 10)
        assert isinstance(module.configure_optimizers(), torch.optim.SGD)


@pytest.mark.parametrize(
    ("data", "model"),
    [("digits", "mlp"), ("mnist", "cnn"), ("fmnist", "simple_cnn"), ("cifar10", "cifar_cnn")],
)
def test_each_dataset_picks_a_default_model_that_the_user_can_override(
    make_job, data: str, model: str
) -> None:
    assert make_job([f"data={data}"]).choices["model"] == model
    assert make_job([f"data={data}", "model=mlp"]).choices["model"] == "mlp"


def test_cifar10_sets_its_eval_batch_and_the_command_line_and_presets_win(make_job) -> None:
    def settings(job: Job) -> tuple:
        s = job.settings
        return (s.local.batch_size, s.local.epochs, s.optim.lr, s.optim.momentum, s.eval.batch_size)

    assert settings(make_job(["data=cifar10"])) == (10, 1, 0.05, 0.0, 100)
    assert settings(make_job(["data=fmnist"])) == (10, 1, 0.05, 0.0, 1000)  # the primary's
    assert settings(make_job(["data=cifar10", "eval.batch_size=500"]))[4] == 500
    preset = make_job(["+experiment=fedavg_vs_scaffold", "data=cifar10", "seed=0"])
    assert settings(preset)[:4] == (64, 1, 0.01, 0.9) and preset.choices["data"] == "cifar10"
    assert make_job(["data=cifar10"]).data.augment is True


def test_mcmahan_cnn_has_the_papers_parameter_count(make_job) -> None:
    module = make_job(["model=cnn"]).model(input_shape=(1, 28, 28), num_classes=10)
    assert sum(p.numel() for p in module.parameters()) == 1_663_370


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["fl.roundz=3"], "unknown key fl.roundz; fl has: num_clients, clients_per_round, rounds"),
        (
            ["partition=nope"],
            "partition=nope is not an option; choose partition from: callable, dirichlet",
        ),
        (["partition=dirichlet", "partition.alpha=0"], "partition.alpha=0 must be > 0"),
        (["partition=dirichlet", "partition.alpha=-1"], "partition.alpha=-1 must be > 0"),
        (
            ["fl.num_clients=5", "fl.clients_per_round=6"],
            "fl.clients_per_round=6 must be between 1",
        ),
        (
            ["fl.rounds=abc"],
            (
                "fl.rounds: Error merging override fl.rounds=abc; "
                "Value 'abc' of type 'str' could not be converted to Integer"
            ),
        ),
        (["eval.target_accuracy=80"], "eval.target_accuracy=80.0 must be a fraction"),
        (
            ["model=nope"],
            "model=nope is not an option; choose model from: cifar_cnn, cnn, femnist_cnn, logistic",
        ),
        (["partition=iid", "partition.alpha=0.5"], "unknown key partition.alpha; partition has:"),
    ],
)
def test_bad_settings_fail_before_any_work_with_one_line(args: list[str], expected: str) -> None:
    with pytest.raises(ConfigError) as error:
        validate_command_line(args)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(expected), message


def test_every_job_of_a_sweep_is_validated() -> None:
    validate_command_line(["-m", "partition=dirichlet", "partition.alpha=0.1,0.5"])
    with pytest.raises(ConfigError, match=r"partition.alpha=-0.5 must be > 0"):
        validate_command_line(["-m", "partition=dirichlet", "partition.alpha=0.1,-0.5"])
    with pytest.raises(ConfigError, match=r"partition=bogus is not an option"):
        validate_command_line(["-m", "partition=iid,bogus"])


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["wire=fp16"], "wire=fp16 is now upload=[fp16]; "),
        (["wire=bf16"], "wire=bf16 is now upload=[bf16]; "),
        (["wire=fp16_both"], "wire=fp16_both is now upload=[fp16] download=[fp16]; "),
        (["wire=none"], "wire=none is now upload=[] download=[]; "),
        (["wire=nope"], "wire=nope: the wire group is no more (wire=none is upload=[] download=[]"),
        (
            ["compression=topk"],
            "compression=topk is now upload=[topk]; a cast goes after a compressor: "
            "upload=[topk,fp16]",
        ),
        (["compression=none"], "compression=none is now upload=[]; "),
        (["-m", "compression=topk,qsgd"], "compression=topk,qsgd is now upload=[topk] / upload=["),
        (["download_compression=int8"], "download_compression=int8 is now download=[int8]; "),
        (
            ["compression=topk", "compression.ratio=0.05"],
            "compression=topk is now upload=[topk]; ",
        ),
        (
            ["compression.ratio=0.05", "compression=topk"],
            "compression.ratio=0.05 is now upload.topk.ratio=0.05 (with upload=[topk]); ",
        ),
        (["compression.bits=2"], "compression.bits=2 is now upload.qsgd.bits=2 (with upload=[qs"),
        (
            ["wire.upload.fp16.error_feedback=true"],
            "wire.upload.fp16.error_feedback=true is now upload.fp16.error_feedback=true; ",
        ),
        (
            ["+download_compression.error_feedback=true"],
            "download_compression.error_feedback=true is now download.int8.error_feedback=true",
        ),
        (["~compression"], "compression: the compression group is no more; "),
    ],
)
def test_the_groups_one_codec_replaced_name_how_to_say_it_now(
    args: list[str], expected: str
) -> None:
    """`wire`, `compression` and `download_compression` became `upload` and `download`, each
    a list of transforms: an old spelling is refused in one line naming the new one, before
    Hydra's own error."""
    with pytest.raises(ConfigError) as error:
        validate_command_line(args)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(expected), message


def test_each_direction_lists_its_transforms_in_the_order_the_sender_applies_them(
    make_job,
) -> None:
    job = make_job(["upload=[topk,fp16]", "upload.topk.ratio=0.05", "download=[int8]"])
    assert list(job.stages.wire.upload) == ["topk", "fp16"]
    assert job.stages.wire.upload["topk"].ratio == 0.05
    assert list(job.stages.wire.download) == ["int8"]
    assert job.choices["upload"] == "topk+fp16" and job.choices["download"] == "int8"
    assert make_job(["upload=[fp16,topk]"]).stages.wire.upload.keys() == {"fp16", "topk"}
    assert list(make_job(["upload=[fp16,topk]"]).stages.wire.upload) == ["fp16", "topk"]
    for as_is in ([], ["upload=[]", "download=[]"]):
        job = make_job(as_is)
        assert not job.stages.wire.upload and not job.stages.wire.download
        assert (job.choices["upload"], job.choices["download"]) == ("none", "none")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["upload.topk.ratio=0.05"],
            "upload.topk.ratio sets topk, which upload=[] does not list; add it: upload=[topk]",
        ),
        (
            ["upload=[topk]", "download.int8.block_size=64"],
            "download.int8.block_size sets int8, which download=[] does not list; add it: ",
        ),
        (["upload=[topk,topk]"], "upload=[topk,topk] names topk twice; list each option"),
        (["upload=[topk]", "upload.topk.ratio=2"], "upload.topk.ratio=2 must be in (0, 1]"),
        (
            ["download=[int8]", "download.int8.error_feedback=true"],
            "download.int8.error_feedback=true: the server sends one model to all clients",
        ),
    ],
)
def test_a_codec_setting_of_an_unlisted_or_repeated_transform_is_refused_in_one_line(
    args: list[str], expected: str
) -> None:
    with pytest.raises(ConfigError) as error:
        validate_command_line(args)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(expected), message


def test_config_files_are_inside_the_package() -> None:
    assert CONF_DIR.endswith("fedlight/conf")


def test_a_model_too_deep_for_the_images_says_so_in_one_line(make_job) -> None:
    with pytest.raises(ConfigError, match=r"^model=simple_cnn cannot take 8×8 images; choose"):
        make_job(["model=simple_cnn"]).model(input_shape=(1, 8, 8), num_classes=10)
