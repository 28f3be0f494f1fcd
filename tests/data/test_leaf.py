"""LEAF's federated datasets (issue 66): FEMNIST, Shakespeare and Synthetic read from the JSON
files LEAF's preprocessing writes (written here, in its format, with a few users), one client per
user with LEAF's per-user test split as the clients' local test sets; the models LEAF trains on
them; the one-line refusals; and `partition=natural` runs through the real CLI."""

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedlight.core.errors import ConfigError
from fedlight.core.tensors import detached_copy
from fedlight.data.base import DataError, TensorDataset
from fedlight.data.characters import LETTERS
from fedlight.data.leaf import Leaf
from fedlight.data.leaf_femnist import LeafFEMNIST
from fedlight.data.leaf_shakespeare import LeafShakespeare
from fedlight.drivers.base import Clients
from fedlight.drivers.synchronous import FederatedLoop
from fedlight.models.femnist_cnn import FemnistCNN
from fedlight.models.stacked_lstm import StackedLSTM
from fedlight.partitions.natural import Natural
from fedlight.runs.federation import with_given_test_sets
from tests.conftest import run_cli
from tests.helpers.natural_data import (
    SPEECHES,
    WINDOW,
    Examples,
    femnist_users,
    write_femnist,
    write_leaf,
    write_shakespeare,
)

# ------------------------------------------------------------------ reading LEAF's files


def test_femnist_gives_each_writer_a_client_and_its_own_test_examples(tmp_path: Path) -> None:
    train, test = write_femnist(tmp_path)
    data = LeafFEMNIST(root=str(tmp_path)).load()
    writers = sorted(train)  # client i is the i-th writer in sorted order
    assert data.num_classes == 62 and data.input_shape == (1, 28, 28)
    assert data.train_x.dtype == torch.float32 and data.normalization is None
    assert data.train_clients is not None and data.test_clients is not None
    for client, writer in enumerate(writers):
        own = data.train_clients == client
        expected = np.asarray(train[writer]["x"], dtype=np.float32).reshape(-1, 1, 28, 28)
        assert torch.equal(data.train_x[own], torch.from_numpy(expected))
        assert data.train_y[own].tolist() == train[writer]["y"]
        tested = data.test_clients == client
        assert data.test_y[tested].tolist() == test[writer]["y"]
    assert len(data.test_y) == sum(len(user["y"]) for user in test.values())


def test_shakespeare_reads_characters_through_leafs_80_character_vocabulary(
    tmp_path: Path,
) -> None:
    train, test = write_shakespeare(tmp_path)
    data = LeafShakespeare(root=str(tmp_path)).load()
    assert len(LETTERS) == 80 == data.num_classes and len(set(LETTERS)) == 80
    assert data.train_x.dtype == torch.int64 and data.input_shape == (WINDOW,)
    roles = sorted(SPEECHES)
    assert data.train_clients is not None and data.test_clients is not None
    for client, role in enumerate(roles):
        own = data.train_clients == client
        texts = ["".join(LETTERS[i] for i in row) for row in data.train_x[own].tolist()]
        assert texts == train[role]["x"]
        assert [LETTERS[i] for i in data.train_y[own].tolist()] == train[role]["y"]
        tested = data.test_y[data.test_clients == client].tolist()
        assert [LETTERS[i] for i in tested] == test[role]["y"]
    # LEAF's own order: the letters, then index 79 is "}"; a line break is class 0
    assert LETTERS.index("a") == 53 and LETTERS[0] == "\n" and LETTERS[-1] == "}"


def test_synthetic_through_data_leaf_keeps_its_vectors_and_counts_its_classes(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(0)

    def users(sizes: list[int]) -> Examples:
        return {
            str(u): {"x": rng.normal(size=(n, 6)).tolist(), "y": rng.integers(0, 4, n).tolist()}
            for u, n in enumerate(sizes)
        }

    train, test = users([5, 9, 3, 4, 6, 2, 7, 3, 3, 5, 8]), users([2, 3, 1, 1, 2, 1, 2, 1, 1, 2, 2])
    write_leaf(tmp_path / "train", train, files=1)
    write_leaf(tmp_path / "test", test, files=1)
    data = Leaf(root=str(tmp_path)).load()
    largest = max(max(user["y"]) for user in [*train.values(), *test.values()])
    assert data.num_classes == largest + 1 and data.input_shape == (6,)
    # users in sorted order of their ids, as strings: "10" comes before "2"
    assert data.train_clients is not None
    assert data.train_y[data.train_clients == 2].tolist() == train["10"]["y"]
    shaped = Leaf(root=str(tmp_path), input_shape=[2, 3], num_classes=9).load()
    assert shaped.input_shape == (2, 3) and shaped.num_classes == 9
    assert torch.equal(shaped.train_x.flatten(1), data.train_x)


def test_leafs_split_by_user_puts_test_writers_in_the_global_test_set_only(
    tmp_path: Path,
) -> None:
    """`-t user`: the test writers are none of the training writers; no client has a local test
    set, and every test example is in the global one."""
    write_leaf(tmp_path / "train", femnist_users({"a": 3, "b": 4}, seed=0))
    write_leaf(tmp_path / "test", femnist_users({"c": 2, "d": 1}, seed=1))
    data = LeafFEMNIST(root=str(tmp_path)).load()
    assert data.test_clients is None and len(data.test_y) == 3
    write_leaf(tmp_path / "mixed" / "train", femnist_users({"a": 3, "b": 4}, seed=0))
    write_leaf(tmp_path / "mixed" / "test", femnist_users({"a": 2, "d": 1}, seed=1))
    data = LeafFEMNIST(root=str(tmp_path / "mixed")).load()
    assert data.test_clients is not None and sorted(data.test_clients.tolist()) == [-1, 0, 0]
    sets = Natural().given_test_sets(data, 2)  # writer a's two, none for b; d's is global only
    assert sets is not None and [len(s) for s in sets] == [2, 0]
    assert (data.test_clients[sets[0]] == 0).all()


# ------------------------------------------------------------------ local test sets


def test_natural_makes_each_users_test_split_its_local_test_set(tmp_path: Path) -> None:
    _, test = write_femnist(tmp_path)
    data = LeafFEMNIST(root=str(tmp_path)).load()
    num_clients = len(test)
    sets = Natural().given_test_sets(data, num_clients)
    assert sets is not None
    pooled, local = with_given_test_sets(data, sets)
    offset = len(data.train_y)
    assert torch.equal(pooled.train_x[offset:], data.test_x)  # the global test set, appended
    for client, writer in enumerate(sorted(test)):
        assert pooled.train_y[local[client]].tolist() == test[writer]["y"]
        assert (local[client] >= offset).all()  # never a training example
    assert sorted(np.concatenate(local).tolist()) == list(range(offset, len(pooled.train_y)))
    assert Natural().given_test_sets(TensorDataset(*([torch.zeros(2)] * 4), 2), 1) is None
    with pytest.raises(ConfigError, match=r"^partition.client_test_fraction=0.2 but the data "):
        Natural(client_test_fraction=0.2).given_test_sets(data, num_clients)


# ------------------------------------------------------------------ refusals


def refusal(source: Any) -> str:
    with pytest.raises(DataError) as caught:
        source.load()
    message = str(caught.value)
    assert "\n" not in message, message
    return message


def test_a_missing_folder_names_the_setting_and_leafs_command(tmp_path: Path) -> None:
    message = refusal(LeafFEMNIST(root=str(tmp_path / "femnist")))
    assert message.startswith(f"data=leaf_femnist: {tmp_path}/femnist/train is not a folder")
    assert "./preprocess.sh -s niid --sf 0.05 -k 0 -t sample" in message
    assert "docs/natural-datasets.md" in message
    (tmp_path / "shakespeare" / "train").mkdir(parents=True)
    message = refusal(LeafShakespeare(root=str(tmp_path / "shakespeare")))
    assert "train holds no .json file" in message and "--tf 0.8" in message
    assert "python main.py -num-tasks" in refusal(Leaf(root=str(tmp_path)))


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "is not JSON"),
        ({"users": ["a"]}, "is not a LEAF file: it needs the keys users"),
        ({"users": ["a"], "user_data": {}}, "user a is listed in users but has no entry"),
        ({"users": ["a"], "user_data": {"a": {"x": [[0.5]], "y": []}}}, "one length"),
        ({"users": ["a"], "user_data": {"a": {"x": [[0.5]], "y": [0.5]}}}, "integer class"),
        ({"users": ["a"], "user_data": {"a": {"x": [[0.5]], "y": [-1]}}}, "label -1 is neg"),
        ({"users": ["a"], "user_data": {"a": {"x": [[0.5], [1, 2]], "y": [0, 1]}}}, "one length"),
        ({"users": ["a"], "user_data": {"a": {"x": [[float("nan")]], "y": [0]}}}, "NaN or Inf"),
    ],
    ids=["json", "keys", "entry", "lengths", "float-label", "negative", "ragged", "nan"],
)
def test_a_damaged_file_is_one_line_naming_it(tmp_path: Path, content: Any, expected: str) -> None:
    write_leaf(tmp_path / "test", {"t": {"x": [[0.5]], "y": [0]}}, files=1)
    (tmp_path / "train").mkdir()
    path = tmp_path / "train" / "part.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content), "utf-8")
    message = refusal(Leaf(root=str(tmp_path)))
    assert message.startswith(f"data=leaf: {path}") and expected in message


def test_inconsistent_data_is_refused_in_one_line(tmp_path: Path) -> None:
    users = femnist_users({"a": 2, "b": 2}, seed=0)
    write_leaf(tmp_path / "train", users, files=1)
    write_leaf(tmp_path / "test", {"a": users["a"]}, files=1)
    (tmp_path / "train" / "again.json").write_text(
        json.dumps({"users": ["a"], "user_data": {"a": users["a"]}}), "utf-8"
    )
    assert "user a is in both" in refusal(LeafFEMNIST(root=str(tmp_path)))
    (tmp_path / "train" / "again.json").unlink()
    message = refusal(Leaf(root=str(tmp_path), input_shape=[3, 3]))
    assert "784 numbers, which data.input_shape=[3, 3] cannot hold" in message
    message = refusal(Leaf(root=str(tmp_path), num_classes=2))
    assert "labels go up to" in message and "set data.num_classes" in message
    role = {"x": ["ab|" * 3], "y": ["a"]}
    write_leaf(tmp_path / "text" / "train", {"r": role}, files=1)
    write_leaf(tmp_path / "text" / "test", {"r": role}, files=1)
    message = refusal(LeafShakespeare(root=str(tmp_path / "text")))
    assert "character '|' is not in LEAF's 80-character vocabulary" in message


# ------------------------------------------------------------------ LEAF's models


def test_femnist_cnn_has_leafs_layers() -> None:
    model = FemnistCNN((1, 28, 28), 62, lr=0.01)
    conv1, conv2 = 5 * 5 * 1 * 32 + 32, 5 * 5 * 32 * 64 + 64
    dense, out = 7 * 7 * 64 * 2048 + 2048, 2048 * 62 + 62  # "same" padding: 28 -> 14 -> 7
    assert sum(p.numel() for p in model.parameters()) == conv1 + conv2 + dense + out
    assert model(torch.zeros(3, 1, 28, 28)).shape == (3, 62)


def test_stacked_lstm_is_leafs_and_starts_as_tensorflows_cell() -> None:
    model = StackedLSTM((WINDOW,), 80, lr=0.8)
    hidden = 256
    embedding, layer1 = 80 * 8, 4 * hidden * (8 + hidden + 2)
    layer2, out = 4 * hidden * (hidden + hidden + 2), hidden * 80 + 80
    assert sum(p.numel() for p in model.parameters()) == embedding + layer1 + layer2 + out
    lstm = model.net.lstm
    for layer in range(2):
        bias_ih, bias_hh = getattr(lstm, f"bias_ih_l{layer}"), getattr(lstm, f"bias_hh_l{layer}")
        assert bias_hh.abs().sum() == 0
        assert (bias_ih[hidden : 2 * hidden] == 1).all()  # BasicLSTMCell's forget_bias=1.0
        assert bias_ih[:hidden].abs().sum() == 0 and bias_ih[2 * hidden :].abs().sum() == 0
    assert model(torch.randint(0, 80, (4, WINDOW))).shape == (4, 80)
    with pytest.raises(ConfigError, match=r"^model=stacked_lstm reads sequences of character"):
        StackedLSTM((1, 28, 28), 62, lr=0.1)


@pytest.mark.filterwarnings("ignore:There is a performance drop:UserWarning")
def test_the_lstm_trains_alike_in_the_sequential_and_vectorized_engines(
    make_job, tmp_path: Path
) -> None:
    """One round of one local step per client: both engines' weights agree to float32 rounding
    of one SGD step (torch.func runs the LSTM client by client: no batching rule for it)."""
    write_shakespeare(tmp_path)
    data = LeafShakespeare(root=str(tmp_path)).load()
    assert data.train_clients is not None
    sets = Natural()(data.train_clients.numpy(), len(SPEECHES), np.random.default_rng(0))
    weights = {}
    for engine in ("sequential", "vectorized"):
        job = make_job(
            [
                "data=leaf_shakespeare",
                f"data.root={tmp_path}",
                "partition=natural",
                f"fl.clients_per_round={len(SPEECHES)}",
                "local.batch_size=16",  # each role's 8 windows: one step
                "optim.lr=0.5",
                f"fl.engine={engine}",
            ]
        )
        torch.manual_seed(0)
        module = job.model(input_shape=data.input_shape, num_classes=data.num_classes)
        clients = Clients(data, [torch.from_numpy(s) for s in sets])
        loop = FederatedLoop(job.settings, clients, module, job.stages)
        initial = detached_copy(loop.server.weights)
        loop.run_round(1)
        weights[engine] = loop.server.weights
    for name, value in weights["sequential"].items():
        torch.testing.assert_close(weights["vectorized"][name], value, rtol=0, atol=1e-6)
    moved = weights["sequential"]["net.lstm.bias_hh_l1"] - initial["net.lstm.bias_hh_l1"]
    assert moved.abs().max() > 1e-3  # one step moved the model: the comparison is not vacuous


# ------------------------------------------------------------------ the CLI


def metrics(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def write_synthetic(root: Path) -> tuple[Examples, Examples]:
    """LEAF's Synthetic as its generator and `-t sample` split write it: 60 numbers and one of 5
    classes per example, devices of unequal sizes."""
    rng = np.random.default_rng(3)

    def devices(sizes: list[int]) -> Examples:
        return {
            str(d): {"x": rng.normal(size=(n, 60)).tolist(), "y": rng.integers(0, 5, n).tolist()}
            for d, n in enumerate(sizes)
        }

    train, test = devices([9, 4, 12, 6, 5]), devices([1, 1, 2, 1, 1])
    write_leaf(root / "train", train, files=1)
    write_leaf(root / "test", test, files=1)
    return train, test


@pytest.mark.parametrize(
    ("option", "writer", "users", "model"),
    [
        ("leaf_femnist", write_femnist, 4, "femnist_cnn"),
        ("leaf_shakespeare", write_shakespeare, 3, "stacked_lstm"),
        ("leaf", write_synthetic, 5, "logistic"),
    ],
    ids=["femnist", "shakespeare", "synthetic"],
)
def test_a_natural_run_of_leafs_files_through_the_cli(
    tmp_path: Path, option: str, writer: Any, users: int, model: str
) -> None:
    train, _ = writer(tmp_path / "leaf")
    result = run_cli(
        f"data={option}",
        f"data.root={tmp_path / 'leaf'}",
        *(["model=logistic"] if option == "leaf" else []),  # the others pick LEAF's model
        "partition=natural",
        "fl.clients_per_round=2",
        "fl.rounds=2",
        "local.batch_size=4",
        "hydra.run.dir=run",
        cwd=tmp_path,
    )
    assert f" model={model} " in result.stdout
    assert f"fl.num_clients={users}, the number of distinct client ids" in result.stderr
    run = tmp_path / "run"
    histogram = json.loads((run / "label_histogram.json").read_text())
    # one row per user in sorted order, its training examples alone (no test example trains)
    sizes = [len(train[user]["y"]) for user in sorted(train)]
    assert [sum(histogram[str(client)]) for client in range(users)] == sizes
    rows = metrics(run)
    assert [row["round"] for row in rows] == ["1", "2"]
    for row in rows:  # every client has its own test examples: its local accuracy is a number
        assert 0 <= float(row["local_accuracy_mean"]) <= 1
        assert 0 <= float(row["test_accuracy"]) <= 1
