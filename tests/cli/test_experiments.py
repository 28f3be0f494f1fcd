"""Experiment presets: each composes, declares the sweep of its table, and runs through the CLI."""

import json
import re
from pathlib import Path

import pytest
import yaml

from fedlight.cli.validate import group_options
from fedlight.core.errors import ConfigError
from tests.conftest import REPO, compose_config, run_cli
from tests.helpers.commands import validate_command_line

PRESETS = [
    "fedavg_vs_scaffold",
    "rounds_vs_epochs",
    "fed_vs_central",
    "selection",
    "lr_schedule",
    "robust",
    "compression",
    "compression_scaffold",
    "privacy",
    "personalization",
    "async",
    "niid_bench",
    "scaffold_stability",
    "scaffold_tutorial",
    "mcmahan2017_table1",
    "fedprox2020",
    "cifar_models",
]


def test_every_preset_is_listed_and_declares_seeds_0_1_2() -> None:
    assert set(group_options("experiment")) == set(PRESETS)
    for preset in PRESETS:
        cfg = compose_config([f"+experiment={preset}"])
        assert cfg.hydra.sweeper.params["seed"] == "0,1,2"
        assert cfg.report.title and cfg.report.metrics


@pytest.mark.parametrize(
    ("preset", "jobs", "choices"),
    [
        ("fedavg_vs_scaffold", 3 * 3, {"data": "fmnist", "model": "simple_cnn"}),
        ("rounds_vs_epochs", 3 * 3 * 3, {"data": "fmnist", "model": "simple_cnn"}),
        ("fed_vs_central", 3 * 3, {"data": "fmnist", "model": "simple_cnn"}),
        ("scaffold_tutorial", 3 * 3, {"data": "cifar10", "partition": "label_blocks"}),
        ("cifar_models", 3 * 3, {"data": "cifar10", "model": "simple_cnn"}),
    ],
)
def test_each_preset_sweep_expands_and_every_job_is_validated(
    preset: str, jobs: int, choices: dict[str, str]
) -> None:
    overrides = validate_command_line(["-m", f"+experiment={preset}"])
    assert len(overrides) == jobs
    cfg = compose_config(overrides[-1])
    assert {g: cfg.hydra.runtime.choices[g] for g in choices} == choices


def test_cifar_models_crosses_three_cnns_and_runs_the_tutorials_normalization_on_request() -> None:
    models = [compose_config(o) for o in validate_command_line(["-m", "+experiment=cifar_models"])]
    assert [c.hydra.runtime.choices["model"] for c in models[::3]] == [
        "cifar_cnn",
        "cnn",
        "simple_cnn",
    ]
    assert {(c.fl.num_clients, c.fl.clients_per_round, c.fl.rounds) for c in models} == {
        (100, 10, 100)
    }
    assert {c.data.statistics for c in models} == {"dataset"}
    half = validate_command_line(
        ["-m", "+experiment=cifar_models", "model=cifar_cnn", "data.statistics=half"]
    )
    assert len(half) == 3
    assert compose_config(half[0]).data.statistics == "half"


def test_fed_vs_central_bundles_algorithm_and_partition_per_setting() -> None:
    settings = {}
    for job in validate_command_line(["-m", "+experiment=fed_vs_central", "seed=0"]):
        cfg = compose_config(job)
        name = cfg.hydra.runtime.choices["experiment/fed_vs_central"]
        settings[name] = (cfg.hydra.runtime.choices.algo, cfg.hydra.runtime.choices.partition)
        assert (cfg.fl.num_clients, cfg.fl.clients_per_round) == (100, 10)
    assert settings == {
        "central": ("central", "iid"),
        "fedavg_iid": ("fedavg", "iid"),
        "fedavg_noniid": ("fedavg", "shards"),
    }


def test_each_robust_setting_builds_its_aggregator_against_20_clients_a_round(make_job) -> None:
    """Every option of experiment/robust sets its aggregator with settings the preset's 20
    participants allow (Bulyan's f = 4 needs 19), under the strongest attack of the table;
    krum_f3 is Krum with the FedAvg tutorial's f = 3."""
    expected = {"krum": 4, "krum_f3": 3, "multi_krum": 4, "bulyan": 4}
    for option in group_options("experiment/robust"):
        job = make_job(["+experiment=robust", f"+experiment/robust={option}", "attack=alie"])
        aggregator = job.algorithm.aggregator
        assert aggregator.option == option.removesuffix("_f3")
        assert getattr(aggregator, "f", None) == expected.get(option)
        assert job.settings.fl.clients_per_round == 20
    swept = compose_config(["+experiment=robust"]).hydra.sweeper.params["+experiment/robust"]
    assert set(swept.split(",")) == set(group_options("experiment/robust"))


def test_each_compression_setting_builds_the_chains_its_label_names(make_job) -> None:
    """Every option of experiment/compression puts the compressors it is named after on the
    wire, in the preset's setting; the SCAFFOLD preset sweeps the same settings for both."""
    expected = {
        "none": (None, None, None, None),
        "topk10": ("TopK", 0.1, True, None),
        "topk5": ("TopK", 0.05, True, None),
        "topk1": ("TopK", 0.01, True, None),
        "topk10_no_ef": ("TopK", 0.1, False, None),
        "topk5_no_ef": ("TopK", 0.05, False, None),
        "topk1_no_ef": ("TopK", 0.01, False, None),
        "qsgd4": ("QSGD", 4, False, None),
        "qsgd8": ("QSGD", 8, False, None),
        "int8": ("Int8", 0, False, None),
        "int8_both": ("Int8", 0, False, "Int8"),
    }
    assert set(group_options("experiment/compression")) == set(expected)
    for option, (kind, setting, error_feedback, download) in expected.items():
        job = make_job(["+experiment=compression", f"+experiment/compression={option}"])
        upload = next(iter(job.stages.wire.upload.values()), None)
        broadcast = next(iter(job.stages.wire.download.values()), None)
        assert type(upload).__name__ == (kind or "NoneType")
        assert type(broadcast).__name__ == (download or "NoneType")
        if upload is not None:
            value = getattr(upload, "ratio", getattr(upload, "bits", None))
            assert (value or getattr(upload, "block_size", None), upload.error_feedback) == (
                setting,
                error_feedback,
            )
        assert (job.settings.fl.num_clients, job.settings.fl.clients_per_round) == (100, 10)
    sweep = validate_command_line(["-m", "+experiment=compression_scaffold", "seed=0"])
    assert len(sweep) == 2 * 4


def test_each_privacy_setting_composes_the_mechanism_and_federation_its_label_names() -> None:
    """Composed as the sweep composes them (the preset after its cell): each cell of
    experiment/privacy gets its mechanism, its N and K = N/10, and its noise or target ε (the
    tutorial's weight noise: σ = 0.01/ε of its row)."""
    mechanisms = {
        "none": "NoPrivacy",
        "fedavg": "DPFedAvg",
        "dpsgd": "DPSGD",
        "weightnoise": "WeightNoise",
    }
    noise_std = {"eps10": 0.01 / 10, "eps1": 0.01 / 1, "eps01": 0.01 / 0.1}  # the tutorial's 0.01/ε
    targets = {"inf": (0.0, None), "eps10": (None, 10), "eps1": (None, 1), "eps01": (None, 0.1)}
    seen = set()
    for job in validate_command_line(["-m", "+experiment=privacy", "seed=0"]):
        cfg = compose_config(job)
        option = cfg.hydra.runtime.choices["experiment/privacy"]
        seen.add(option)
        named = re.fullmatch(r"(none|fedavg|dpsgd|weightnoise)_?(\d+)(?:_(\w+))?", option)
        assert named, option
        kind, clients, budget = named[1], int(named[2]), named[3]
        assert (cfg.fl.num_clients, cfg.fl.clients_per_round) == (clients, clients // 10), option
        assert cfg.privacy._target_.endswith(mechanisms[kind]), option
        assert (cfg.local.batch_size, cfg.hydra.runtime.choices.selection) == (16, "poisson")
        if kind == "weightnoise":
            assert cfg.privacy.noise_std == pytest.approx(noise_std[budget]), option
        elif budget is not None:
            noise = (cfg.privacy.noise_multiplier, cfg.privacy.target_epsilon)
            assert noise == targets[budget], option
    assert seen == set(group_options("experiment/privacy")) and len(seen) == 17


def test_each_personalization_setting_composes_the_method_its_label_names() -> None:
    """Composed as the sweep composes them: every cell on the same federation (100 clients, 2
    classes each, 20% held out per client), differing only in the method (and the tutorial's
    personal-only FedPer in its SGD rate, 0.01)."""
    methods = {
        "fedavg": ("FedAvg", {}, 0),
        "fedavg_finetune": ("FedAvg", {}, 1),
        "fedper_last1": ("FedPer", {"personal_last": 1, "train_shared": True}, 0),
        "fedper_last2": ("FedPer", {"personal_last": 2}, 0),
        "fedper_personal_only": ("FedPer", {"personal_last": 1, "train_shared": False}, 0),
        "lg_fedavg": ("LGFedAvg", {"global_last": 1}, 0),
        "ditto": ("Ditto", {"lam": 0.1}, 0),
        "ditto_lam1": ("Ditto", {"lam": 1.0}, 0),
        "local": ("Local", {}, 0),
    }
    seen = set()
    for job in validate_command_line(["-m", "+experiment=personalization", "seed=0"]):
        cfg = compose_config(job)
        option = cfg.hydra.runtime.choices["experiment/personalization"]
        seen.add(option)
        algorithm, settings, finetune = methods[option]
        assert cfg.algo._target_.endswith(f".{algorithm}"), option
        assert {k: cfg.algo[k] for k in settings} == settings, option
        assert cfg.eval.finetune_epochs == finetune, option
        assert cfg.optim.lr == (0.01 if option == "fedper_personal_only" else 0.05), option
        assert (cfg.fl.num_clients, cfg.fl.clients_per_round) == (100, 10)
        assert cfg.partition.classes_per_client == 2 and cfg.partition.client_test_fraction == 0.2
    assert seen == set(methods) == set(group_options("experiment/personalization"))


def test_each_niid_bench_setting_builds_its_method_on_flower_niid_bench_settings(make_job) -> None:
    """Built as the sweep builds them: 10 clients all training, E=10, B=64, SGD 0.01 momentum 0.9
    weight decay 1e-5, simple_cnn on Fashion-MNIST, on both splits; SCAFFOLD's three variants."""
    methods = {
        "fedavg": ("FedAvg", {}),
        "scaffold": ("Scaffold", {"correction": "weights", "control_norm": "steps"}),
        "scaffold_flower": (
            "Scaffold",
            {"control_weighting": "samples", "control_init": "model", "control_norm": "steps"},
        ),
        "scaffold_fedlight": (
            "Scaffold",
            {"correction": "gradient", "control_norm": "momentum_steps"},
        ),
        "fedprox": ("FedProx", {"mu": 0.01}),
        "fednova": ("FedNova", {"momentum": 0.9}),
    }
    seen = set()
    for job in validate_command_line(["-m", "+experiment=niid_bench", "seed=0"]):
        option = compose_config(job).hydra.runtime.choices["experiment/niid_bench"]
        built = make_job(job)
        seen.add((option, built.choices["partition"]))
        name, settings = methods[option]
        algorithm = built.algorithm
        assert type(algorithm).__name__ == name, option
        assert {k: getattr(algorithm, k) for k in settings} == settings, option
        assert built.choices["data"] == "fmnist" and built.choices["model"] == "simple_cnn"
        fl, local = built.settings.fl, built.settings.local
        assert (fl.num_clients, fl.clients_per_round, fl.rounds) == (10, 10, 50)
        assert (local.epochs, local.batch_size) == (10, 64)
        optim = {k: built.config["optim"][k] for k in ("lr", "momentum", "weight_decay")}
        assert optim == {"lr": 0.01, "momentum": 0.9, "weight_decay": 1e-5}
    assert {option for option, _ in seen} == set(methods)
    assert {split for _, split in seen} == {"dirichlet", "label_quantity"}


def test_the_scaffold_stability_map_crosses_variants_momenta_and_learning_rates(make_job) -> None:
    """18 cells, all SCAFFOLD on the same 2-class federation; the paper's variant is forced."""
    cells = set()
    for job in validate_command_line(["-m", "+experiment=scaffold_stability", "seed=0"]):
        built = make_job(job)
        algorithm = built.algorithm
        assert type(algorithm).__name__ == "Scaffold" and algorithm.force
        cells.add((algorithm.variant, algorithm.momentum, built.settings.fl.rounds))
    assert len(cells) == 6 and {rounds for *_, rounds in cells} == {6}
    assert {variant for variant, *_ in cells} == {"fedlight", "niid_bench", "paper"}


def test_each_async_setting_does_the_same_client_work_on_the_same_clock() -> None:
    """Composed as the sweep composes them: 500 local trainings in every cell (rounds × clients
    per update), all on system=tiers; only fedavg_deadline has a deadline."""
    seen = set()
    for job in validate_command_line(["-m", "+experiment=async", "seed=0"]):
        cfg = compose_config(job)
        option = cfg.hydra.runtime.choices["experiment/async"]
        seen.add(option)
        assert cfg.hydra.runtime.choices.system == "tiers", option
        algo = cfg.hydra.runtime.choices.algo
        per_update = {"fedavg": cfg.fl.clients_per_round, "fedasync": 1}.get(algo)
        if algo == "fedbuff":
            per_update = cfg.algo.buffer_size
        assert cfg.fl.rounds * per_update == 500, option
        assert (cfg.system.deadline is not None) == (option == "fedavg_deadline"), option
        if option == "fedasync_tutorial_rule":  # the tutorial's 0.9^τ itself, τ since last arrival
            rule = ("alpha", "staleness", "staleness_base", "staleness_from")
            assert [cfg.algo[k] for k in rule] == [1.0, "exponential", 0.9, "last_arrival"]
    assert seen == set(group_options("experiment/async")) and len(seen) == 9


def test_command_line_overrides_replace_the_presets_sweep() -> None:
    jobs = validate_command_line(["-m", "+experiment=fedavg_vs_scaffold", "seed=7", "data=mnist"])
    assert len(jobs) == 3
    assert all("seed=7" in job and "seed=0" not in job for job in jobs)
    assert compose_config(jobs[0]).hydra.runtime.choices.data == "mnist"


def test_a_bad_value_in_a_preset_sweep_fails_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^local.epochs=0 must be"):
        validate_command_line(["-m", "+experiment=rounds_vs_epochs", "local.epochs=1,0"])


def test_slurm_launcher_preset_composes_on_submitit() -> None:
    launcher = compose_config(["hydra/launcher=slurm"]).hydra.launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert (launcher.gpus_per_node, launcher.cpus_per_task, launcher.timeout_min) == (1, 4, 240)


def test_a_preset_runs_as_a_sweep_and_reports_its_table(tmp_path: Path) -> None:
    """fed_vs_central on digits for 2 rounds: three settings, one seed, then `fedlight report`."""
    sweep = tmp_path / "sweep"
    run_cli(
        "-m",
        "+experiment=fed_vs_central",
        "data=digits",
        "model=mlp",
        "fl.num_clients=10",
        "fl.clients_per_round=5",
        "fl.rounds=2",
        "seed=0",
        f"hydra.sweep.dir={sweep}",
        cwd=REPO,
    )
    summaries = [json.loads((sweep / str(j) / "summary.json").read_text()) for j in range(3)]
    assert [s["algo"] for s in summaries] == ["central", "fedavg", "fedavg"]
    assert [s["partition"] for s in summaries] == ["iid", "iid", "shards"]
    assert summaries[0]["comm_mb"] == 0 < summaries[1]["comm_mb"] == summaries[2]["comm_mb"]

    run_cli("report", str(sweep), cwd=REPO)
    report = (sweep / "report.md").read_text()
    assert "| Centralized | FedAvg (IID) | FedAvg (non-IID) |" in report.replace("  ", " ")
    assert "python -m fedlight -m +experiment=fed_vs_central data=digits" in report


# McMahan et al. 2017, Table 1, as read from the paper: cell -> published rounds
MCMAHAN_TABLE1 = REPO / "docs/results/references/mcmahan2017.yaml"


def test_each_mcmahan_cell_is_its_table_entry_and_stops_at_its_target_or_twice_its_rounds() -> None:
    published = yaml.safe_load(MCMAHAN_TABLE1.read_text())["table"]["cells"]
    expected = {
        cell: (*cell.split("_")[:3], int(cell.split("_c")[-1]), rounds)
        for cell, rounds in published.items()
    }
    assert set(group_options("experiment/mcmahan2017_table1")) == set(expected)
    # each job as the preset's own sweep composes it (the cell before the preset)
    jobs = validate_command_line(["-m", "+experiment=mcmahan2017_table1", "seed=0"])
    assert len(jobs) == len(expected)
    for job in jobs:
        cfg = compose_config(job)
        choices = cfg.hydra.runtime.choices
        model, split, b, c, rounds = expected[choices["experiment/mcmahan2017_table1"]]
        assert choices.model == {"2nn": "mlp", "cnn": "cnn"}[model]
        assert choices.partition == {"iid": "iid", "noniid": "shards"}[split]
        assert cfg.partition.get("shards_per_client", 2) == 2
        assert cfg.local.batch_size == (None if b == "binf" else 10)
        assert cfg.local.epochs == (1 if model == "2nn" else 5)
        assert (cfg.fl.num_clients, cfg.fl.clients_per_round) == (100, max(c, 1))
        assert cfg.fl.rounds == 2 * rounds
        assert cfg.eval.target_accuracy == (0.97 if model == "2nn" else 0.99)
        assert cfg.eval.stop_at_target and cfg.eval.every == 1
        assert (cfg.optim.momentum, cfg.optim.weight_decay) == (0.0, 0.0)
        assert not cfg.data.normalize  # pixels in [0, 1]
