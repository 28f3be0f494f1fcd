"""Every option of every group composes and instantiates; bad settings fail with one line."""

import pytest
import torch

from fedlight.cli import CONF_DIR, group_options, validate_command_line
from fedlight.config import CONFIG_GROUPS
from fedlight.errors import ConfigError
from fedlight.experiment import Job

# What an option needs besides itself (it refuses to run without, in one line; tested elsewhere).
COMPANIONS = {
    "privacy=dp_fedavg": ["selection=poisson"],
    "privacy=adaptive_clip": ["selection=poisson"],
    "algo=fedasync": ["system=homogeneous"],
    "algo=fedbuff": ["system=homogeneous"],
}
MODEL_INPUT = {
    "mlp": (1, 8, 8),
    "cnn": (1, 8, 8),
    "cifar_cnn": (3, 32, 32),
    "simple_cnn": (1, 28, 28),
}


def test_every_group_has_its_documented_options() -> None:
    assert set(group_options("algo")) >= {"fedavg"}
    assert set(group_options("data")) == {"digits", "mnist", "fmnist", "cifar10"}
    assert set(group_options("model")) == {"mlp", "cnn", "cifar_cnn", "simple_cnn"}
    assert set(group_options("partition")) == {"iid", "shards", "dirichlet", "label_quantity"}
    assert set(group_options("selection")) >= {"random"}
    assert set(group_options("lr_schedule")) >= {"constant"}
    assert set(group_options("logger")) == {"csv", "wandb"}


@pytest.mark.parametrize(
    ("group", "option"),
    [(g, o) for g in CONFIG_GROUPS for o in group_options(g)],
)
def test_every_option_composes_and_instantiates(make_job, group: str, option: str) -> None:
    job = make_job([f"{group}={option}", *COMPANIONS.get(f"{group}={option}", [])])
    assert job.choices[group] == option
    if group == "model":
        module = job.model(input_shape=MODEL_INPUT[option], num_classes=10)
        logits = module(torch.zeros(2, *MODEL_INPUT[option]))
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
        (["partition=nope"], "partition=nope is not an option; choose partition from: dirichlet"),
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
        (["model=nope"], "model=nope is not an option; choose model from: cifar_cnn, cnn, mlp"),
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


def test_config_files_are_inside_the_package() -> None:
    assert CONF_DIR.endswith("fedlight/conf")


def test_a_model_too_deep_for_the_images_says_so_in_one_line(make_job) -> None:
    with pytest.raises(ConfigError, match=r"^model=simple_cnn cannot take 8×8 images; choose"):
        make_job(["model=simple_cnn"]).model(input_shape=(1, 8, 8), num_classes=10)
