"""benchmarks/peers' workloads N1 and XD and its device path (issue 65): N1 is a round of fedlight's
niid_bench preset and XD pfl-research's cross-device setting; `run_workload` on tiny data in the
real on-disk formats trains, through fedlight's CLI, what the peers' shared training computes;
`--device` reaches every framework, and `--device cuda` without a GPU is refused in one line. No
peer's environment is needed (the frameworks run here are fedlight's rows)."""

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from torchvision.io import write_png

from benchmarks.peers import peer_common, run, spec
from benchmarks.peers.cli import chosen_workloads, main
from benchmarks.peers.run import fedlight_command, frameworks_for, record_path
from benchmarks.peers.workloads import WORKLOADS, Workload
from scripts.peer_blocks import seeds_lines
from tests.benchmarks.test_peers import tiny_data, trained_here
from tests.data.test_data import write_idx

CONF = Path(__file__).resolve().parents[2] / "fedlight" / "conf"


def test_n1_is_a_round_of_the_niid_bench_preset():
    preset = OmegaConf.load(CONF / "experiment" / "niid_bench.yaml")
    dirichlet = OmegaConf.load(CONF / "partition" / "dirichlet.yaml")
    n1 = WORKLOADS["N1"]
    assert {"override /data": n1.data} in preset.defaults
    assert {"override /model": n1.model} in preset.defaults
    assert (n1.num_clients, n1.clients_per_round) == (preset.fl.num_clients, preset.fl.num_clients)
    assert (n1.epochs, n1.batch_size) == (preset.local.epochs, preset.local.batch_size)
    assert (n1.lr, n1.momentum, n1.weight_decay) == tuple(
        preset.optim[k] for k in ("lr", "momentum", "weight_decay")
    )
    assert n1.partition == "dirichlet"  # the first split of the preset's sweep
    assert n1.partition_settings == {"alpha": dirichlet.alpha, "min_samples": dirichlet.min_samples}


def test_xd_is_pfl_researchs_cross_device_setting():
    """1,000 users of 50 CIFAR-10 images each, drawn IID, 50 a round, B = 10, E = 1, local SGD
    at 0.1 (pfl-research's benchmarks/image_classification, cifar10_iid)."""
    xd = WORKLOADS["XD"]
    sets = spec.client_sets(xd, np.arange(50_000) % 10)
    assert len(sets) == 1000 and {len(s) for s in sets} == {50}
    assert sorted(i for s in sets for i in s) == list(range(50_000))
    assert (xd.clients_per_round, xd.batch_size, xd.epochs) == (50, 10, 1)
    assert (xd.lr, xd.momentum, xd.weight_decay) == (0.1, 0.0, 0.0)
    assert (xd.data, xd.model, xd.data_settings) == ("cifar10", "pfl_cnn", {"augment": False})
    assert chosen_workloads("XD") == ["XD"] and chosen_workloads("N1") == ["N1"]


def test_the_frameworks_of_a_run_follow_the_device_and_the_workload(capsys):
    cpu = SimpleNamespace(frameworks=None, before=None, device="cpu")
    cuda = SimpleNamespace(frameworks=None, before=None, device="cuda")
    assert frameworks_for(WORKLOADS["N1"], cpu) == ["fedlight", "flower", "pfl"]
    assert frameworks_for(WORKLOADS["N1"], cuda) == [
        "fedlight",
        "fedlight-vectorized",
        "flower",
        "pfl",
    ]
    assert frameworks_for(WORKLOADS["XD"], cuda) == ["fedlight", "flower", "pfl"]
    assert capsys.readouterr().out == (
        "XD: fedlight-vectorized left out (pfl-research's CNN has dropout, which "
        "fl.engine=vectorized refuses)\n"
    )
    before = SimpleNamespace(frameworks=["pfl"], before=Path("elsewhere"), device="cpu")
    assert frameworks_for(WORKLOADS["W1-2NN"], before) == ["fedlight-before", "pfl"]


def test_fedlights_command_carries_the_device_the_engine_and_the_workloads_settings():
    command = fedlight_command(
        WORKLOADS["XD"], Path("f"), Path("d"), Path("r"), "cuda", "vectorized"
    )
    for part in (
        "device=cuda",
        "fl.engine=vectorized",
        "data.augment=false",
        "fl.memory_format=contiguous",
        "optim.momentum=0.0",
        "model=pfl_cnn",
    ):
        assert part in command
    n1 = fedlight_command(WORKLOADS["N1"], Path("f"), Path("d"), Path("r"), "cpu", "sequential")
    assert "optim.momentum=0.9" in n1 and "optim.weight_decay=1e-05" in n1
    assert record_path(WORKLOADS["XD"], "cpu").name == "XD.json"
    assert record_path(WORKLOADS["XD"], "cuda").name == "XD-cuda.json"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_device_cuda_without_a_gpu_is_refused_in_one_line(tmp_path):
    with pytest.raises(SystemExit) as refused:
        main(["run", "--workload", "XD", "--data-root", str(tmp_path), "--device", "cuda"])
    message = str(refused.value)
    assert message.startswith("--device cuda: no CUDA device is available here")
    assert "--device cpu" in message and "\n" not in message


def test_fedlight_before_needs_its_checkout(tmp_path):
    argv = ["run", "--workload", "N1", "--data-root", str(tmp_path)]
    with pytest.raises(SystemExit, match="--frameworks fedlight-before: name the checkout"):
        main([*argv, "--frameworks", "fedlight-before"])


def write_image_tree(root: Path, per_class: int, seed: int) -> None:
    """A CIFAR-10 ImageFolder tree of random 32×32 PNGs, four classes."""
    generator = torch.Generator().manual_seed(seed)
    for split, count in (("train", per_class), ("test", 2)):
        for name in ("cat", "dog", "frog", "ship"):
            for k in range(count):
                path = root / split / name / f"{k}.png"
                path.parent.mkdir(parents=True, exist_ok=True)
                image = torch.randint(0, 256, (3, 32, 32), generator=generator, dtype=torch.uint8)
                write_png(image, str(path))


def write_fashion_mnist(root: Path) -> None:
    """Fashion-MNIST's four IDX files: 60 training and 20 test images of every class."""
    rng = np.random.default_rng(0)
    raw = root / "FashionMNIST" / "raw"
    write_idx(raw / "train-images-idx3-ubyte", rng.integers(0, 256, (60, 28, 28)))
    write_idx(raw / "train-labels-idx1-ubyte", np.arange(60) % 10)
    write_idx(raw / "t10k-images-idx3-ubyte", rng.integers(0, 256, (20, 28, 28)))
    write_idx(raw / "t10k-labels-idx1-ubyte", np.arange(20) % 10)


@pytest.fixture
def benchmark_folders(tmp_path, monkeypatch) -> Path:
    """The benchmark's work folder, records and the decoded-image cache under tmp_path."""
    monkeypatch.setattr(run, "WORK", tmp_path / "work")
    monkeypatch.setattr(run, "RECORDS", tmp_path / "records")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def run_args(data_root: Path, frameworks: list[str]) -> SimpleNamespace:
    """`run`'s arguments: one repeat, one thread, on the CPU (the path `--device cuda` takes)."""
    return SimpleNamespace(
        data_root=data_root, repeats=1, threads=1, frameworks=frameworks, before=None, device="cpu"
    )


def test_fedlight_trains_on_the_handed_spec_what_the_peers_train(benchmark_folders, capsys):
    """XD's kind of work (pfl-research's CNN with its dropout, here with momentum, weight decay
    and two reshuffled epochs) through `run_workload` and fedlight's CLI: after one round its
    global model is the weighted average of the clients peer_common trains from the handed
    spec, up to the rounding of that average. With u = eps/2 and M the largest |entry| of the
    global model before, the clients' and the average: fedlight adds the weighted mean of the
    updates d_k = w_k − g to g (d_k rounded: 2uM each, |d_k| ≤ 2M; the products 2uM; K − 1 sums
    (K − 1)·2uM; the last addition uM: (2K + 3)uM in all, to first order), the test's plain
    weighted mean KuM; apart by at most (3K + 3)uM."""
    tree = benchmark_folders / "cifar"
    write_image_tree(tree, per_class=5, seed=0)
    workload = Workload(
        "T-XD",
        "cifar10",
        "pfl_cnn",
        "iid",
        4,
        2,
        2,
        4,
        0.1,
        1,
        momentum=0.9,
        weight_decay=1e-3,
        data_settings={"augment": False},
        eval_batch_size=7,
        vectorized="dropout",
        fedlight_overrides=("fl.memory_format=contiguous",),
    )
    path = run.run_workload(workload, run_args(tree, ["fedlight", "fedlight-vectorized"]))
    assert "T-XD: fedlight-vectorized left out (dropout)" in capsys.readouterr().out
    record = json.loads(path.read_text())
    [only] = record["runs"]
    assert record["device"] == "cpu" and record["samples"] == 2 * 2 * 5
    assert only["trained_with"] == {
        "engine": "sequential",
        "memory_format": "contiguous",
        "device": "cpu",
    }
    handed = peer_common.Spec(run.WORK / "work" / "T-XD")
    clients = handed["selections"][0]
    initial = handed.net().state_dict()
    expected, last_round = trained_here(handed)
    weights = torch.load(run.WORK / "runs" / "T-XD" / "00_fedlight" / "model.pt")
    unit = torch.finfo(torch.float32).eps / 2
    for key, value in expected.state_dict().items():
        scale = max(float(t[key].abs().max()) for t in [*last_round, initial, {key: value}])
        bound = (3 * len(clients) + 3) * unit * scale
        assert float((weights[f"net.{key}"] - value).abs().max()) <= bound, key


@pytest.mark.slow
def test_fedlights_vectorized_engine_runs_as_its_own_row(benchmark_folders):
    """N1's kind of work (NIID-Bench's LeNet, a Dirichlet split, momentum and weight decay) with
    fedlight's vectorized engine: the row says the engine and device its run reports."""
    write_fashion_mnist(benchmark_folders / "fmnist")
    workload = Workload(
        "T-N1",
        "fmnist",
        "simple_cnn",
        "dirichlet",
        3,
        3,
        2,
        8,
        0.01,
        1,
        {"alpha": 0.5, "min_samples": 10},
        momentum=0.9,
        weight_decay=1e-5,
        eval_batch_size=7,
    )
    args = run_args(benchmark_folders / "fmnist", ["fedlight-vectorized"])
    record = json.loads(run.run_workload(workload, args).read_text())
    [only] = record["runs"]
    assert only["framework"] == "fedlight-vectorized"
    assert (
        only["trained_with"]["engine"] == "vectorized" and only["trained_with"]["device"] == "cpu"
    )
    assert record["samples"] == 2 * 60 and 0.0 <= only["accuracy"] <= 1.0


def test_seeds_hand_fedlight_its_own_draws_for_each_seed(benchmark_folders, monkeypatch):
    """`seeds`: fedlight alone at each other seed, handed the index sets and selections it draws
    for that seed (the runs themselves stood in for: what they are handed is the point)."""
    handed_sets = {}

    def one_run(framework, workload, folder, args, number):
        handed_sets[workload.seed] = json.loads((folder / "clients.json").read_text())
        return {"framework": framework, "accuracy": 0.5 + workload.seed / 10}

    monkeypatch.setattr(run, "one_run", one_run)
    monkeypatch.setattr(run, "load_data", lambda workload, root: tiny_data(channels=3))
    args = SimpleNamespace(seeds=[1, 2], threads=1, device="cpu", data_root=Path("unused"))
    workload = Workload("T-XD", "cifar10", "pfl_cnn", "iid", 4, 2, 1, 5, 0.1, 1)
    path = run.run_seeds(workload, args)
    assert path.name == "T-XD-seeds.json"
    record = json.loads(path.read_text())
    assert [(r["seed"], r["accuracy"]) for r in record["runs"]] == [(1, 0.6), (2, 0.7)]
    labels = tiny_data(channels=3).train_y.numpy()
    for seed in (1, 2):
        seeded = Workload("T-XD", "cifar10", "pfl_cnn", "iid", 4, 2, 1, 5, 0.1, 1, seed=seed)
        assert handed_sets[seed] == spec.client_sets(seeded, labels)
    assert handed_sets[1] != handed_sets[2]


def test_the_seeds_block_sets_the_frameworks_spread_beside_the_seeds(tmp_path):
    runs = [
        {
            "framework": f,
            "accuracy": a,
            "round_seconds": [1.0, 1.0],
            "round_cpu_seconds": [1.0, 1.0],
        }
        for f, a in (("fedlight", 0.70), ("flower", 0.72), ("pfl", 0.71))
    ]
    for r in runs:
        r |= {"version": "1", "outside_seconds": 1.0, "peak_rss_mb": 1.0, "peak_pss_mb": 1.0}
        r |= {"peak_threads": 1, "processes": 1}
    main_record = {"workload": "N", "rounds": 2, "samples": 10, "runs": runs}
    (tmp_path / "N.json").write_text(json.dumps(main_record))
    seeded = {"runs": [{"seed": 1, "accuracy": 0.65}, {"seed": 2, "accuracy": 0.75}]}
    (tmp_path / "N-seeds.json").write_text(json.dumps(seeded))
    (tmp_path / "W.json").write_text(json.dumps(main_record | {"workload": "W"}))  # no seeds
    lines = seeds_lines(tmp_path, {"records": ["N.json", "W.json"]})
    assert len(lines) == 3
    assert lines[2] == (
        "| N | fedlight 70.00%, flower 72.00%, pfl 71.00% | seed 0: 70.00%, seed 1: 65.00%, "
        "seed 2: 75.00% | 2.00 | 10.00 |"
    )
