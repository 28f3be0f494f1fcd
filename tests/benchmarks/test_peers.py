"""benchmarks/peers (issue 65): what is handed to the peers equals what fedlight draws and
computes, the settings and ratios the page shows, and the records it reads. Nothing here installs
a peer; the test that drives the peers' own environments is slow and skipped without them."""

import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from benchmarks import memory_tree
from benchmarks.peers import measure, peer_common, records, spec
from benchmarks.peers.cli import chosen_workloads, main
from benchmarks.peers.measure import Usage, cpu_at
from benchmarks.peers.run import fedlight_boundaries, fedlight_result
from benchmarks.peers.setup import PEERS, closure, venv_python
from benchmarks.peers.workloads import WORKLOADS, Workload
from fedlight.core.context import RoundContext
from fedlight.core.rng import Stream, derive_seed, numpy_generator
from fedlight.data.base import Normalization, TensorDataset
from fedlight.models.cnn import CNN
from fedlight.models.mlp import MLP
from fedlight.models.pfl_cnn import PflCNN
from fedlight.models.simple_cnn import SimpleCNN
from fedlight.partitions.shards import Shards
from fedlight.stages.selection.random import RandomSelection
from scripts.peer_blocks import (
    BEHIND,
    intervals_lines,
    line_lines,
    peers_lines,
    ratio_interval,
    ratio_verdict,
    settings_lines,
)

TINY = Workload(
    "T-2NN",
    "mnist",
    "mlp",
    "shards",
    4,
    2,
    1,
    5,
    0.1,
    2,
    {"shards_per_client": 2},
    eval_batch_size=7,
)
# dropout, momentum, weight decay and two epochs (each reshuffled), as in N1 and XD
TINY_DROPOUT = Workload(
    "T-XD",
    "cifar10",
    "pfl_cnn",
    "iid",
    4,
    2,
    2,
    4,
    0.1,
    2,
    momentum=0.9,
    weight_decay=1e-3,
    eval_batch_size=7,
)


def tiny_data(n: int = 40, channels: int = 1) -> TensorDataset:
    """uint8 images (channels×8×8) with labels of every class, and their per-channel
    statistics."""
    generator = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, channels, 8, 8), generator=generator, dtype=torch.uint8)
    labels = torch.arange(n) % 4
    normalization = Normalization((0.3,) * channels, (0.2,) * channels)
    return TensorDataset(images, labels, images[:13], labels[:13], 4, None, normalization)


def trained_here(handed: peer_common.Spec) -> tuple[nn.Module, list[dict[str, torch.Tensor]]]:
    """The handed training done in this process: each round's clients trained by peer_common from
    the global weights, averaged weighted by their examples (FedAvg, as every framework); and the
    last round's clients' weights."""
    net = handed.net()
    for round_index, chosen in enumerate(handed["selections"], 1):
        start = {k: v.clone() for k, v in net.state_dict().items()}
        trained, sizes = [], []
        for client in chosen:
            net.load_state_dict(start)
            sizes.append(peer_common.train_client(net, handed, client, round_index))
            trained.append({k: v.clone() for k, v in net.state_dict().items()})
        weights = [n / sum(sizes) for n in sizes]
        net.load_state_dict(
            {k: sum(w * t[k] for w, t in zip(weights, trained, strict=True)) for k in start}
        )
    return net, trained


def test_the_handed_index_sets_and_selections_are_fedlights_draws():
    data = tiny_data()
    content = spec.spec(TINY, data, threads=1)
    expected = Shards(shards_per_client=2)(
        data.train_y.numpy(), 4, numpy_generator(0, Stream.PARTITION)
    )
    assert content["clients"] == [s.tolist() for s in expected]
    for round_index, chosen in enumerate(content["selections"], 1):
        federation = SimpleNamespace(num_clients=4, seed=0)
        ctx = RoundContext(federation, round_index, (), ())  # type: ignore[arg-type]
        assert chosen == RandomSelection().select(ctx, 2, None)  # type: ignore[arg-type]
    for key, seed in content["shuffle_seeds"].items():
        round_index, client = map(int, key.split("/"))
        assert seed == derive_seed(0, Stream.LOCAL_TRAINING, round_index, client)
    assert content["init_seed"] == derive_seed(0, Stream.MODEL_INIT)
    assert spec.samples_trained(content) == sum(
        len(content["clients"][c]) for r in content["selections"] for c in r
    )


def test_the_peers_networks_are_fedlights_layers_and_initial_weights():
    nets = (
        ("mlp", MLP, (1, 28, 28)),
        ("cnn", CNN, (1, 28, 28)),
        ("simple_cnn", SimpleCNN, (1, 28, 28)),
        ("pfl_cnn", PflCNN, (3, 32, 32)),
    )
    for name, model, shape in nets:
        seed = derive_seed(0, Stream.MODEL_INIT)
        torch.manual_seed(seed)
        reference = model(input_shape=shape, num_classes=10, lr=0.1).net.state_dict()
        ours = peer_common.build(name, shape, 10, seed).state_dict()
        assert list(ours) == list(reference)
        assert all(torch.equal(ours[k], reference[k]) for k in reference)


def test_the_peers_batches_are_fedlights_inputs_bit_for_bit():
    data = tiny_data()
    prepare = peer_common.Prepare([0.3], [0.2])
    batch = data.train_x[torch.tensor([3, 1, 7])]
    assert torch.equal(prepare(batch), data.prepare(batch))


def test_a_driver_trains_and_evaluates_from_the_written_spec(tmp_path):
    data = tiny_data()
    spec.write(tmp_path, spec.spec(TINY, data, threads=1), data)
    handed = peer_common.Spec(tmp_path)
    assert handed.train_x.dtype == torch.uint8 and torch.equal(handed.train_x, data.train_x)
    net = handed.net()
    client = handed["selections"][0][0]
    assert peer_common.train_client(net, handed, client, 1) == len(handed.clients[client])
    assert 0.0 <= peer_common.accuracy(net, handed) <= 1.0


def record(seconds: dict[str, list[list[float]]]) -> dict:
    """A record of two rounds of 100 samples each, the given round seconds per framework."""
    runs = [
        {
            "framework": framework,
            "version": "1",
            "round_seconds": rounds,
            "round_cpu_seconds": [0.5 * s for s in rounds],
            "outside_seconds": 2.0,
            "accuracy": 0.5,
            "peak_rss_mb": 900.0,
            "peak_pss_mb": 400.0 if framework == "fedlight" else 800.0,
            "peak_threads": 3,
            "processes": 1,
        }
        for framework, repeats in seconds.items()
        for rounds in repeats
    ]
    return {
        "workload": "T",
        "settings": {"rounds": "2"},
        "rounds": 2,
        "samples": 200,
        "threads": 1,
        "torch": "2",
        "python": "3.11",
        "runs": runs,
    }


def test_steady_state_leaves_the_first_round_out_and_memory_is_fedlight_over_peer():
    content = record({"fedlight": [[9.0, 1.0, 1.0], [9.0, 1.0, 3.0]], "flower": [[9.0, 2.0]]})
    ours, peer = records.summarize(content, "fedlight"), records.summarize(content, "flower")
    assert ours.seconds_per_round == 1.5  # median of the repeats' medians (1.0 and 2.0)
    assert ours.samples_per_second == 100 / 1.5
    assert peer.seconds_per_round == 2.0
    assert (ours.cpu_seconds_per_round, peer.cpu_seconds_per_round) == (0.75, 1.0)
    assert records.pss_ratio(ours, peer) == 0.5
    with pytest.raises(ValueError, match="no run of pfl"):
        records.summarize(content, "pfl")


def test_the_blocks_show_every_framework_and_the_settings(tmp_path):
    (tmp_path / "T.json").write_text(
        json.dumps(record({"pfl": [[3.0, 2.0]], "fedlight": [[3.0, 1.0]]}))
    )
    lines = peers_lines(tmp_path, {"records": ["T.json"]})
    assert [line.split(" | ")[1] for line in lines[2:]] == ["fedlight", "pfl"]  # fedlight first
    assert lines[2].split(" | ")[5] == "" and lines[3].split(" | ")[5] == "2.00×"
    assert lines[3].split(" | ")[6:9] == ["1.00", "0.50", "2.00×"]  # CPU s, cores, ratio
    assert line_lines(tmp_path, {"records": ["T.json"]}) == [
        "- T: fedlight trained at 2.00× pfl-research's samples per second (2.00× in CPU time), "
        "with the same final accuracy in every run (50.00%)."
    ]
    settings = settings_lines(tmp_path, {"records": ["T.json"]})
    assert settings[0] == "| setting | T |" and "| repeats | 1 |" in settings


def alternated(content: dict) -> dict:
    """The record's runs in the order `run` writes them: cycle k holds every framework's k-th
    run, each cycle starting one framework further along."""
    names = list(dict.fromkeys(r["framework"] for r in content["runs"]))
    by_name = {n: [r for r in content["runs"] if r["framework"] == n] for n in names}
    cycles = len(by_name[names[0]])
    order = [names[k % len(names) :] + names[: k % len(names)] for k in range(cycles)]
    return {**content, "runs": [by_name[n][k] for k in range(cycles) for n in order[k]]}


def test_the_intervals_pair_each_repeat_and_decide_only_beyond_the_noise(tmp_path):
    """Repeat k of fedlight against repeat k of the other (the k-th cycle of the alternation,
    whatever the order within the record); the geometric mean of the paired ratios with its t
    interval on their logs decides; fedlight-before is named but not counted as a peer."""
    steady = {
        "fedlight": [1.0, 2.0, 1.0],
        "fedlight-before": [0.5, 1.0, 0.55],
        "pfl": [2.0, 4.0, 2.2],
        "flower": [1.0, 2.2, 0.9],
    }
    content = alternated(
        record({f: [[9.0, s, s] for s in seconds] for f, seconds in steady.items()})
    )
    assert records.paired(content, "fedlight", "pfl") == [2.0, 2.0, pytest.approx(2.2)]
    assert records.paired(content, "fedlight", "pfl", "round_cpu_seconds") == pytest.approx(
        [2.0, 2.0, 2.2]
    )
    (tmp_path / "T.json").write_text(json.dumps(content))
    *table, blank, count = intervals_lines(tmp_path, {"records": ["T.json"]})
    rows = {line.split(" | ")[1]: line.split(" | ")[2:5] for line in table[2:]}
    logs = [math.log(2.0), math.log(2.0), math.log(2.2)]
    half = 4.302653 * statistics.stdev(logs) / math.sqrt(3)  # t(0.975, 2)
    mean = statistics.fmean(logs)
    band = f"{math.exp(mean):.2f}× [{math.exp(mean - half):.2f}, {math.exp(mean + half):.2f}]"
    assert rows["fedlight / pfl"] == ["2.00, 2.00, 2.20", band, "fedlight ahead"]
    assert rows["fedlight / flower"][2] == "no difference shown"  # 1.00, 1.10, 0.90
    assert rows["fedlight / fedlight-before"][2] == "fedlight-before ahead"  # 0.50, 0.50, 0.55
    assert blank == ""
    assert count == (
        "Of the 2 comparisons of fedlight with a peer: by speed, fedlight ahead in 1, the peer "
        "ahead in 0, no difference shown in 1; by CPU, fedlight ahead in 1, the peer ahead in 0, "
        "no difference shown in 1."
    )
    [line] = line_lines(tmp_path, {"records": ["T.json"]})
    assert f"and {band} pfl-research's samples per second ({band} in CPU time)" in line
    one = record({"fedlight": [[9.0, 1.0]], "pfl": [[9.0, 0.5]]})
    (tmp_path / "O.json").write_text(json.dumps(one))
    *table, _, count = intervals_lines(tmp_path, {"records": ["O.json"]})
    assert table[2].split(" | ")[3:5] == ["0.50×", "one repeat: no interval"]
    assert count.endswith("no difference shown in 0 (and 1 with one repeat).")
    assert ratio_verdict(ratio_interval([0.5, 0.55, 0.52])) == BEHIND


def test_fedlights_round_seconds_are_read_from_its_metrics(tmp_path):
    (tmp_path / "metrics.csv").write_text("round,test_accuracy,wall_seconds\n1,,2.5\n2,0.75,4.0\n")
    assert fedlight_result(tmp_path) == ([2.5, 1.5], 0.75)


def test_a_rounds_cpu_seconds_are_read_between_its_boundaries():
    trace = [(10.0, 1.0), (11.0, 1.5), (12.0, 3.5)]
    usage = Usage(9.0, 4.0, 0, 0.0, 0.0, 1, 1, trace, [(11.5, "round 1: x"), (13.0, "round 2:")])
    assert cpu_at(trace, 9.0) == 1.0 and cpu_at(trace, 13.0) == 3.5  # clamped at the ends
    assert usage.cpu_between(10.5, 11.5) == pytest.approx(2.5 - 1.25)
    # the last round's console line marks its end; metrics.csv gives the seconds before it
    assert fedlight_boundaries([1.0, 0.5], usage) == [11.5, 12.5, 13.0]


def test_a_process_cpu_seconds_are_its_own_and_survive_odd_names():
    fields = " ".join(["S"] + [str(i) for i in range(1, 20)])  # state, then fields 4..22
    assert measure.cpu_seconds(f"12 (a ) b) {fields}") == (11 + 12) / measure.TICKS
    own = measure.sample(os.getpid())
    assert own is not None and own[3] > 0


def test_a_run_counts_the_processes_of_its_session_and_ends_those_left(tmp_path):
    """A grandchild adopted by init (its parent ended) is still the run's: measured, then
    killed when the run's process ends."""
    script = (
        "import subprocess, sys, time; "
        "left = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print(left.pid, flush=True); time.sleep(1.5)"
    )
    usage = measure.measure([sys.executable, "-c", script], dict(os.environ), tmp_path / "log")
    assert usage.exit_code == 0 and usage.processes == 2
    [(_, line)] = usage.lines
    stat = Path(f"/proc/{line}/stat")
    for _ in range(50):  # killed: gone once reaped, a zombie until then
        if not stat.exists() or stat.read_text().rpartition(")")[2].split()[0] == "Z":
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"process {line}, left by the run, still runs")


class Vanished(type(Path())):
    """A /proc folder found a moment ago and gone when it is read (its process ended)."""

    def iterdir(self):
        raise FileNotFoundError(2, "No such file or directory", str(self))

    def glob(self, pattern, **_):
        raise FileNotFoundError(2, "No such file or directory", str(self))


def test_a_process_that_ends_while_the_tree_is_walked_is_only_itself(monkeypatch):
    """A member can end between being listed and being read, its /proc folder going with it
    (a peer run failed so once under the default kernels): the walk counts it and goes on."""
    monkeypatch.setattr(memory_tree, "Path", Vanished)
    assert memory_tree.children(4450) == [4450]


def test_a_before_that_is_not_a_checkout_is_refused(tmp_path):
    argv = ["run", "--workload", "W1", "--data-root", str(tmp_path), "--before", str(tmp_path)]
    with pytest.raises(SystemExit, match=f"--before {tmp_path}: not a checkout of fedlight"):
        main(argv)


def test_workloads_named_by_family_and_an_unknown_one_refused():
    assert chosen_workloads("W1") == ["W1-2NN", "W1-CNN"]
    assert chosen_workloads("W1-CNN") == ["W1-CNN"]
    with pytest.raises(SystemExit, match="--workload W9: no such workload"):
        chosen_workloads("W9")
    assert all(w.settings()["rounds"] == str(w.rounds) for w in WORKLOADS.values())


def test_a_peer_shares_fedlights_torch_and_what_it_requires():
    found = closure("torch")
    assert {"torch", "filelock"} <= found and "numpy" not in found


@pytest.mark.slow
@pytest.mark.parametrize("peer", [p for p in PEERS if not p.unavailable], ids=lambda p: p.name)
@pytest.mark.parametrize(
    ("workload", "channels"), [(TINY, 1), (TINY_DROPOUT, 3)], ids=["2NN", "dropout"]
)
def test_each_peer_computes_what_the_others_compute(tmp_path, peer, workload, channels):
    """The peer's driver, in its environment, on a tiny spec: the accuracy the same training done
    here gives (skipped where `python -m benchmarks.peers setup` has not been run). With dropout,
    momentum, weight decay and two epochs, the peer draws the same masks and orders."""
    if not venv_python(peer).exists():
        pytest.skip(f"{peer.name}'s environment is absent (python -m benchmarks.peers setup)")
    data = tiny_data(channels=channels)
    spec.write(tmp_path, spec.spec(workload, data, threads=1), data)
    handed = peer_common.Spec(tmp_path)
    expected = peer_common.accuracy(trained_here(handed)[0], handed)
    driver = Path(peer_common.__file__).parent / f"{peer.driver}.py"
    out = tmp_path / "out.json"
    env = {"PYTHONPATH": str(driver.parent), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    env["PFL_PYTORCH_DEVICE"] = "cpu"
    subprocess.run(
        [str(venv_python(peer)), str(driver), str(tmp_path), str(out)],
        env=env,
        check=True,
        capture_output=True,
        timeout=600,
    )
    report = json.loads(out.read_text())
    assert report["accuracy"] == expected
    assert len(report["boundaries"]) == workload.rounds + 1
