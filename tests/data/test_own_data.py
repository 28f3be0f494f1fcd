"""Datasets and partitions of one's own (issue 33): a map-style torch Dataset or a
LightningDataModule as the data (`data=torch_dataset`, `data=datamodule`), the data's own clients
(`partition=natural`), client sets from a file or a function (`partition=from_file`, `callable`),
and the one-line refusals of each. The datasets are made up in `tests/helpers/own_data.py`."""

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

from fedlight.core.errors import ConfigError
from fedlight.core.rng import Stream, numpy_generator
from fedlight.data.base import DataError
from fedlight.data.datamodule import DataModule
from fedlight.data.torch_dataset import TorchDataset, to_tensors
from fedlight.partitions.base import checked_index_sets
from fedlight.partitions.callable import UserFunction
from fedlight.partitions.dirichlet import Dirichlet
from fedlight.partitions.iid import IID
from fedlight.partitions.label_quantity import LabelQuantity
from fedlight.partitions.natural import Natural
from fedlight.partitions.shards import Shards
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from tests.conftest import rows_without_timings, run_cli
from tests.helpers.commands import validate_command_line
from tests.helpers.own_data import CLASSES, WRITERS, ImagesOnly, TinyMNIST, Writers, writer_examples

WRITERS_DATA = ["data=torch_dataset", "data.dataset=tests.helpers.own_data.Writers"]
NATURAL = [*WRITERS_DATA, "data.client_key=writers", "partition=natural"]
SHORT = ["fl.clients_per_round=2", "fl.rounds=2", "local.batch_size=4", "checkpoint.every=1"]


def writer_sets(writers: list[str]) -> list[np.ndarray]:
    """Each writer's example indices, the writers in sorted order: the clients the data has."""
    names = np.array(writers)
    return [np.flatnonzero(names == name) for name in sorted(set(writers))]


def histogram_of(labels: np.ndarray, sets: list[np.ndarray]) -> dict[str, list[int]]:
    return {str(c): np.bincount(labels[s], minlength=CLASSES).tolist() for c, s in enumerate(sets)}


# ------------------------------------------------------------------ converting a user's dataset


def test_a_dataset_of_items_converts_into_tensors_with_each_examples_client() -> None:
    data = TorchDataset(dataset="tests.helpers.own_data.Writers", client_key="writers").load()
    train, test = Writers(train=True), Writers(train=False)
    assert torch.equal(data.train_x, train.images) and torch.equal(data.test_x, test.images)
    assert torch.equal(data.train_y, train.labels) and torch.equal(data.test_y, test.labels)
    assert data.num_classes == CLASSES and data.normalization is None
    assert data.train_clients is not None
    names = sorted(WRITERS)  # client i is the i-th writer in sorted order
    assert [names[i] for i in data.train_clients.tolist()] == train.writers
    assert data.to(torch.device("cpu")).train_clients is data.train_clients


def test_pil_images_are_kept_uint8_and_standardized_with_the_training_sets_statistics(
    tmp_path: Path,
) -> None:
    """torchvision's form: (PIL image, int) items, `train=True/False`, a `root`."""
    source = TorchDataset(dataset="tests.helpers.own_data.TinyMNIST", root=str(tmp_path))
    data = source.load()
    train, test = TinyMNIST(str(tmp_path), train=True), TinyMNIST(str(tmp_path), train=False)
    assert data.train_x.dtype == torch.uint8 and data.train_x.shape == (60, 1, 8, 8)
    assert torch.equal(data.train_x[:, 0], train.data) and torch.equal(data.test_x[:, 0], test.data)
    assert torch.equal(data.train_y, train.targets) and data.train_clients is None
    pixels = train.data.double() / 255
    assert data.normalization is not None
    assert data.normalization.mean == pytest.approx((pixels.mean().item(),), abs=1e-12)
    assert data.normalization.std == pytest.approx((pixels.std(unbiased=False).item(),), abs=1e-12)
    batch = data.prepare(data.train_x[:5])
    expected = (data.train_x[:5].float() / 255 - data.normalization.mean[0]) / (
        data.normalization.std[0]
    )
    assert torch.equal(batch, expected)


def test_inputs_alone_take_their_labels_from_targets_and_num_classes_can_be_given() -> None:
    data = TorchDataset(
        dataset="tests.helpers.own_data.ImagesOnly", split_argument="train", num_classes=7
    ).load()
    assert data.train_y.tolist() == ImagesOnly(train=True).targets and data.num_classes == 7
    assert data.train_x.dtype == torch.float32 and data.input_shape == (1, 8, 8)


def test_the_split_argument_and_its_values_are_settings() -> None:
    """A dataset that picks its split otherwise (`split="train"`, a folder): `split_argument`."""
    source = TorchDataset(
        dataset="tests.helpers.own_data.Writers", split_argument="train", train_split=False
    )
    assert torch.equal(source.load().train_y, Writers(train=False).labels)


def test_a_datamodules_sets_are_converted_and_a_subset_passes_on_its_client_ids() -> None:
    data = DataModule(
        datamodule="tests.helpers.own_data.WritersData",
        kwargs={"batch_size": 3},
        client_key="writers",
    ).load()
    whole = Writers(train=True)
    assert torch.equal(data.train_x, whole.images[2:])
    assert torch.equal(data.test_y, Writers(train=False).labels)
    names = sorted(set(whole.writers[2:]))
    assert data.train_clients is not None
    assert [names[i] for i in data.train_clients.tolist()] == whole.writers[2:]


def test_torchs_tensor_dataset_and_a_datamodule_over_it_convert_with_their_0d_labels() -> None:
    """torch.utils.data.TensorDataset's items are (input, 0-d tensor): the commonest kind of
    dataset, its labels class indices like any other."""
    train, test = Writers(train=True), Writers(train=False)
    from_dataset = TorchDataset(dataset="tests.helpers.own_data.tensor_pairs").load()
    from_module = DataModule(datamodule="tests.helpers.own_data.TensorData").load()
    for data in (from_dataset, from_module):
        assert torch.equal(data.train_x, train.images) and torch.equal(data.test_x, test.images)
        assert torch.equal(data.train_y, train.labels) and torch.equal(data.test_y, test.labels)
        assert data.num_classes == CLASSES


def test_a_conversion_is_done_once_for_the_same_settings() -> None:
    source = TorchDataset(dataset="tests.helpers.own_data.Writers", client_key="writers")
    again = TorchDataset(dataset="tests.helpers.own_data.Writers", client_key="writers")
    assert again.load() is source.load()
    assert TorchDataset(dataset="tests.helpers.own_data.Writers").load() is not source.load()


class Items(Dataset):
    """A dataset of the given items, for the refusals."""

    def __init__(self, items: list, **attributes: object) -> None:
        self.items = items
        self.__dict__.update(attributes)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> object:
        return self.items[index]


class NoLength(Dataset):
    def __getitem__(self, index: int) -> object:
        return torch.zeros(1), 0


IMAGE = torch.zeros(1, 2, 2)
PAIRS = [(IMAGE, 0), (IMAGE, 1)]


@pytest.mark.parametrize(
    ("train", "key", "classes", "expected"),
    [
        (NoLength(), None, None, "the training set (NoLength) has no len(); fedlight needs a map"),
        (Items([]), None, None, "the training set is empty"),
        (Items([IMAGE, IMAGE]), None, None, "the training set's item 0 is a Tensor, not (input,"),
        (Items([(IMAGE, 0.5)]), None, None, "the training set's item 0 has label 0.5, not a"),
        (
            Items([(IMAGE, torch.tensor(0.5))]),
            None,
            None,
            "the training set's item 0 has label 0.5, not a",
        ),
        (
            Items([(IMAGE, torch.tensor([0, 1]))]),
            None,
            None,
            "the training set's item 0 has label tensor([0, 1]), not a",
        ),
        (
            Items([(IMAGE, 0), (torch.full((1, 2, 2), math.nan), 1)]),
            None,
            None,
            "the training set's item 1 has input values that are not finite (NaN or Inf); a model "
            "trained or tested on them gives NaN: replace them in the dataset",
        ),
        (
            Items([(IMAGE, 0), (IMAGE, 10**9)]),
            None,
            None,
            "src has labels up to 1000000000 but 4 examples: a model for 1000000001 classes; "
            "labels are class indices 0..C-1: map them to 0..C-1",
        ),
        (
            Items(PAIRS),
            None,
            10**9,
            "data.num_classes=1000000000 but src has 4 examples: a model for 1000000000 classes; "
            "set data.num_classes to the number of classes",
        ),
        (Items([("text", 0)]), None, None, "the training set's item 0 has an input of type str"),
        (
            Items([(IMAGE, 0), (torch.zeros(1, 3, 3), 1)]),
            None,
            None,
            "the training set's item 1 has an input of shape (1, 3, 3) and item 0 one of (1, 2,",
        ),
        (
            Items([(torch.zeros(2, 2, dtype=torch.uint8), 0)]),
            None,
            None,
            "uint8 inputs of shape (2, 2); fedlight standardizes uint8 images per channel",
        ),
        (Items(PAIRS), None, 1, "data.num_classes=1 but src has labels up to 1; set data.num_cl"),
        (Items([(IMAGE, -1)]), None, None, "src has label -1; labels are class indices 0..C-1"),
        (Items(PAIRS), "writer", None, "data.client_key=writer: the training set of src has no"),
        (
            Items(PAIRS, writer=["a"]),
            "writer",
            None,
            "data.client_key=writer: the training set's writer has shape (1,) but the set holds 2",
        ),
    ],
)
def test_a_dataset_outside_the_contract_is_refused_in_one_line(
    train: Dataset, key: str | None, classes: int | None, expected: str
) -> None:
    with pytest.raises(DataError) as error:
        to_tensors(train, train, "src", key, classes)
    message = str(error.value)
    assert "\n" not in message and expected in message, message


# ------------------------------------------------------------------ partition=natural


def test_natural_gives_each_client_exactly_its_writers_examples_and_draws_nothing() -> None:
    ids = np.array(["b", "a", "c", "a", "b", "a"])
    rng = numpy_generator(0, Stream.PARTITION)
    state = rng.bit_generator.state
    sets = Natural()(ids, 3, rng)
    assert [s.tolist() for s in sets] == [[1, 3, 5], [0, 4], [2]]
    assert rng.bit_generator.state == state
    with pytest.raises(ConfigError, match=r"^fl.num_clients=4 but the data has 3 distinct"):
        Natural()(ids, 4, rng)


def test_natural_takes_the_number_of_clients_from_the_data(make_job) -> None:
    job = make_job([*NATURAL, "fl.clients_per_round=2"])
    assert job.settings.fl.num_clients == len(WRITERS) == job.config["fl"]["num_clients"]
    data = job.data.load()
    sets = job.partition(job.partition.keys(data), 5, numpy_generator(0, Stream.PARTITION))
    expected = writer_sets(writer_examples(train=True))
    assert all(np.array_equal(a, b) for a, b in zip(sets, expected, strict=True))
    assert make_job([*NATURAL, "fl.clients_per_round=2", "fl.num_clients=5"]).settings == (
        job.settings
    )


def test_natural_keeps_the_per_client_test_split(make_job) -> None:
    job = make_job([*NATURAL, "fl.clients_per_round=2", "partition.client_test_fraction=0.5"])
    data = job.data.load()
    labels = data.train_y.numpy()
    sets = job.partition(job.partition.keys(data), 5, numpy_generator(0, Stream.PARTITION))
    train, test = job.partition.hold_out(sets, labels, seed=0)
    assert test is not None and all(len(t) for t in test)
    for whole, kept, held in zip(sets, train, test, strict=True):
        assert np.array_equal(np.sort(np.concatenate([kept, held])), whole)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            [*NATURAL, "fl.num_clients=7"],
            "fl.num_clients=7 but partition=natural gives 5 clients, the number of distinct "
            "client ids in the training data (data.client_key); leave fl.num_clients out",
        ),
        (
            ["partition=natural"],
            "partition=natural needs each training example's client id and the data gives none; "
            "use data=torch_dataset (or data=datamodule) with data.client_key=",
        ),
        ([*WRITERS_DATA, "partition=natural"], "partition=natural needs each training example"),
        ([*NATURAL[:2], "data.client_key=writer", "partition=natural"], "data.client_key=writer:"),
        (["fl.num_clients=null"], "fl.num_clients=null but partition=iid splits into a number"),
    ],
)
def test_the_number_of_clients_is_refused_in_one_line_where_it_cannot_be(
    args: list[str], expected: str
) -> None:
    with pytest.raises(ConfigError) as error:
        validate_command_line(args)
    message = str(error.value)
    assert "\n" not in message and message.startswith(expected), message


# ------------------------------------------------------------------ from_file and callable


def test_client_sets_from_a_file_round_trip_and_give_the_number_of_clients(
    make_job, tmp_path: Path
) -> None:
    lists = [[4, 0, 7], [], [1, 2, 3, 9]]
    path = tmp_path / "splits.json"
    path.write_text(json.dumps(lists))
    job = make_job(
        [*WRITERS_DATA, "partition=from_file", f"partition.path={path}", "fl.clients_per_round=2"]
    )
    assert job.settings.fl.num_clients == 3
    data = job.data.load()
    sets = job.partition(job.partition.keys(data), 3, numpy_generator(0, Stream.PARTITION))
    assert [s.tolist() for s in sets] == [sorted(s) for s in lists]
    assert all(s.dtype == np.int64 for s in sets)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "no such file"),
        ("[[0, 1],", "not JSON (Expecting value: line 1 column 9 (char 8)); give a JSON list"),
        ('{"a": [1]}', "holds dict {'a': [1]}; give a JSON list of lists of training-set indices"),
        ("[]", "holds list []; give a JSON list of lists"),
        ("[1, 2]", "holds list [1, 2]; give a JSON list of lists"),
    ],
)
def test_a_bad_file_of_client_sets_is_refused_in_one_line(
    tmp_path: Path, content: str | None, expected: str
) -> None:
    path = tmp_path / "splits.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as error:
        validate_command_line(["partition=from_file", f"partition.path={path}"])
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"partition.path={path}: {expected}"), message


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        ([[0, 1]], "S gives 1 client sets for fl.num_clients=2; give one index list per client"),
        ([[0, 1], [2, 10]], "S: client 1 lists index 10 but the training set holds 10 examples;"),
        ([[0, -1], [2]], "S: client 0 lists index -1 but the training set holds 10 examples;"),
        ([[0, 1], [1, 2]], "S: index 1 is listed twice (clients 0 and 1); each training exam"),
        ([[0, 0], [2]], "S: index 0 is listed twice (client 0); each training example"),
        ([[0.5], [2]], "S: client 0's set is not a list of integer indices"),
        ([[[0]], [2]], "S: client 0's set is not a list of integer indices"),
        ([[[0], [1, 2]], [2]], "S: client 0's set is not a list of integer indices"),
    ],
)
def test_user_client_sets_are_one_per_client_in_range_and_disjoint(
    sets: list, expected: str
) -> None:
    with pytest.raises(ConfigError) as error:
        checked_index_sets(sets, 10, 2, "S")
    assert str(error.value).startswith(expected), error.value


def test_a_file_naming_an_example_the_data_lacks_stops_the_run_with_exit_2(
    tmp_path: Path,
) -> None:
    """Checked against the training set once it is loaded: one line, exit 2."""
    path = tmp_path / "splits.json"
    path.write_text(json.dumps([[0, 1], [2, 1000]]))
    result = run_cli(
        *WRITERS_DATA,
        "partition=from_file",
        f"partition.path={path}",
        *SHORT,
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"fedlight: error: partition.path={path}: client 1 lists index 1000 but the training set "
        "holds 50 examples; indices are 0..49"
    )


def test_a_partition_function_gets_the_labels_read_only_and_the_seeds_generator(make_job) -> None:
    labels = np.arange(10) % 3
    sets = UserFunction(function="tests.helpers.own_data.random_parts")(
        labels, 3, numpy_generator(0, Stream.PARTITION)
    )
    drawn = np.array_split(numpy_generator(0, Stream.PARTITION).permutation(10), 3)
    assert [s.tolist() for s in sets] == [sorted(p.tolist()) for p in drawn]
    with pytest.raises(ValueError, match="read-only"):
        UserFunction(function="tests.helpers.own_data.writes_labels")(
            labels, 1, np.random.default_rng()
        )
    assert labels.tolist() == (np.arange(10) % 3).tolist()
    job = make_job(["partition=callable", "partition.function=tests.helpers.own_data.random_parts"])
    assert job.partition.split.__name__ == "random_parts" and job.settings.fl.num_clients == 100


@pytest.mark.parametrize(
    ("function", "expected"),
    [
        (
            "tests.helpers.own_data.nothing",
            "partition.function=tests.helpers.own_data.nothing cannot be imported (module "
            "tests.helpers.own_data has no nothing); give the dotted path of a function (labels, "
            "num_clients, generator)",
        ),
        ("nomodule.split", "partition.function=nomodule.split cannot be imported (No module"),
        (
            "tests.helpers.own_data.wrong_arguments",
            "partition.function=tests.helpers.own_data.wrong_arguments cannot take (labels, "
            "num_clients, generator) (too many positional arguments)",
        ),
        (
            "tests.helpers.own_data.CLASSES",
            "partition.function=tests.helpers.own_data.CLASSES is not callable (in",
        ),
    ],
)
def test_a_partition_function_that_cannot_be_is_refused_before_any_work(
    function: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as error:
        validate_command_line(["partition=callable", f"partition.function={function}"])
    assert str(error.value).startswith(expected), error.value


@pytest.mark.parametrize(
    ("function", "expected"),
    [
        ("overlapping", "overlapping: index 0 is listed twice (clients 0 and 1)"),
        ("always_two", "always_two gives 2 client sets for fl.num_clients=3; give one index"),
        ("not_a_list", "not_a_list returned a ndarray; return a list with one index array per"),
    ],
)
def test_a_partition_functions_faulty_sets_are_refused_naming_it(
    function: str, expected: str
) -> None:
    partition = UserFunction(function=f"tests.helpers.own_data.{function}")
    with pytest.raises(ConfigError) as error:
        partition(np.zeros(10, dtype=np.int64), 3, np.random.default_rng(0))
    assert str(error.value).startswith(f"partition.function=tests.helpers.own_data.{expected}"), (
        error.value
    )


# ------------------------------------------------------------------ determinism


SCHEMES = [
    IID(),
    Shards(shards_per_client=2),
    Dirichlet(alpha=0.5, min_samples=2),
    LabelQuantity(classes_per_client=2),
    UserFunction(function="tests.helpers.own_data.random_parts"),
]


@pytest.mark.parametrize("scheme", SCHEMES, ids=lambda s: type(s).__name__)
def test_partitions_draw_only_from_the_generator_they_are_given(scheme) -> None:
    """The global numpy and torch generators, seeded anyhow, change nothing; the derived
    generator's seed does."""
    labels = np.random.default_rng(3).integers(0, 4, 200)

    def split(global_seed: int, seed: int) -> list[list[int]]:
        np.random.seed(global_seed)
        torch.manual_seed(global_seed)
        sets = scheme(labels, 8, numpy_generator(seed, Stream.PARTITION))
        return [s.tolist() for s in sets]

    assert split(1, 0) == split(2, 0)
    assert split(1, 0) != split(1, 1)


# ------------------------------------------------------------------ data._target_


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (
            "torchvision.datasets.MNIST",
            "data._target_=torchvision.datasets.MNIST is not a fedlight data source (it has no "
            "load()); write data=torch_dataset data.dataset=torchvision.datasets.MNIST "
            "data.root=<its folder>",
        ),
        (
            "tests.helpers.own_data.WritersData",
            "data._target_=tests.helpers.own_data.WritersData is not a fedlight data source (it "
            "has no load()); write data=datamodule "
            "data.datamodule=tests.helpers.own_data.WritersData",
        ),
        ("nomodule.Data", "data._target_=nomodule.Data cannot be imported (No module named"),
        ("torchvision.datasets.MNISTX", "data._target_=torchvision.datasets.MNISTX cannot be"),
        ("os.path", "data._target_=os.path is not a fedlight data source (it has no load()); "),
    ],
)
def test_a_data_target_that_is_no_data_source_is_refused_in_one_line(
    target: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as error:
        validate_command_line([f"data._target_={target}"])
    message = str(error.value)
    assert "\n" not in message and message.startswith(expected), message


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["data.dataset=torchvision.datasets.MNIST"],
            "data.dataset=torchvision.datasets.MNIST cannot be called with {train} (missing a "
            "required argument: 'root'); set data.root, data.kwargs and data.split_argument",
        ),
        (
            ["data.dataset=tests.helpers.own_data.ImagesOnly", "data.root=x"],
            "data.dataset=tests.helpers.own_data.ImagesOnly cannot be called with {root, train} "
            "(got an unexpected keyword argument 'root')",
        ),
        (
            ["data.dataset=tests.helpers.own_data.Nope"],
            "data.dataset=tests.helpers.own_data.Nope cannot be imp",
        ),
        (
            ["data.dataset=tests.helpers.own_data.WRITERS"],
            "data.dataset=tests.helpers.own_data.WRITERS is not call",
        ),
        (
            ["data.dataset=tests.helpers.own_data.Writers", "data.num_classes=1"],
            "data.num_classes=1 must",
        ),
    ],
)
def test_a_dataset_setting_that_cannot_work_is_refused_before_any_work(
    args: list[str], expected: str
) -> None:
    with pytest.raises(ConfigError) as error:
        validate_command_line(["data=torch_dataset", *args])
    message = str(error.value)
    assert "\n" not in message and message.startswith(expected), message


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["data.datamodule=tests.helpers.own_data.Writers"],
            "data.datamodule=tests.helpers.own_data.Writers is not a LightningDataModule class",
        ),
        (
            ["data.datamodule=tests.helpers.own_data.WritersData", "data.kwargs={batch:3}"],
            "data.datamodule=tests.helpers.own_data.WritersData cannot be called with {batch} (got "
            "an unexpected keyword argument 'batch'); set data.kwargs to its constructor's",
        ),
    ],
)
def test_a_datamodule_setting_that_cannot_work_is_refused_before_any_work(
    args: list[str], expected: str
) -> None:
    with pytest.raises(ConfigError) as error:
        validate_command_line(["data=datamodule", *args])
    assert str(error.value).startswith(expected), error.value


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        (
            "NoTrainLoader",
            "data.datamodule=tests.helpers.own_data.NoTrainLoader: its train_dataloader() returned "
            "None, not one DataLoader; return the DataLoader of the training set",
        ),
        (
            "FailingTestLoader",
            "data.datamodule=tests.helpers.own_data.FailingTestLoader: its test_dataloader() "
            "failed (RuntimeError: the test files are on another disk)",
        ),
        (
            "SeveralTestLoaders",
            "data.datamodule=tests.helpers.own_data.SeveralTestLoaders: its test_dataloader() "
            "returned list, not one DataLoader; return the DataLoader of the test set",
        ),
        (
            "SetupFails",
            "data.datamodule=tests.helpers.own_data.SetupFails: its setup('fit') failed "
            "(FileNotFoundError: no data under /data/mine)",
        ),
    ],
)
def test_a_datamodule_that_gives_no_data_is_refused_in_one_line_naming_its_hook(
    module: str, expected: str
) -> None:
    with pytest.raises(DataError) as error:
        DataModule(datamodule=f"tests.helpers.own_data.{module}").load()
    message = str(error.value)
    assert "\n" not in message and message.startswith(expected), message


def test_a_datamodule_whose_setup_fails_says_so_with_exit_2(tmp_path: Path) -> None:
    """Not "a file cannot be written": what failed, and where."""
    args = ("data=datamodule", "data.datamodule=tests.helpers.own_data.SetupFails")
    result = run_cli(*args, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path, check=False)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "fedlight: error: data.datamodule=tests.helpers.own_data.SetupFails: its setup('fit') "
        "failed (FileNotFoundError: no data under /data/mine); fix the DataModule or data.kwargs"
    )


def test_missing_dataset_files_are_one_line(tmp_path: Path) -> None:
    """torchvision's own error for files it cannot find, named with the setting."""
    source = TorchDataset(dataset="torchvision.datasets.MNIST", root=str(tmp_path))
    with pytest.raises(DataError) as error:
        source.load()
    assert str(error.value).startswith(
        "data.dataset=torchvision.datasets.MNIST: its train=True split cannot be opened "
        "(Dataset not found."
    ), error.value


# ------------------------------------------------------------------ through the real CLI


def test_natural_clients_through_the_cli_are_the_writers(tmp_path: Path) -> None:
    """5 writers, 5 clients, fl.num_clients never given: said on the console; each client's
    label histogram is its writer's."""
    run = tmp_path / "run"
    result = run_cli(*NATURAL, *SHORT, f"hydra.run.dir={run}", cwd=tmp_path)
    assert (
        "fedlight: fl.num_clients=5, the number of distinct client ids in the training data "
        "(data.client_key) (partition=natural)" in result.stderr
    )
    writers = writer_examples(train=True)
    labels = Writers(train=True).labels.numpy()
    histogram = json.loads((run / "label_histogram.json").read_text())
    assert histogram == histogram_of(labels, writer_sets(writers))
    assert len(json.loads((run / "participation.json").read_text())["counts"]) == 5
    assert len(rows_without_timings(run)) == 2


def test_a_torchvision_style_dataset_runs_through_the_cli(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run_cli(
        "data=torch_dataset",
        "data.dataset=tests.helpers.own_data.TinyMNIST",
        f"data.root={tmp_path}",
        "data.kwargs={download:false}",
        "fl.num_clients=4",
        "partition=shards",
        "partition.shards_per_client=1",
        *SHORT,
        f"hydra.run.dir={run}",
        cwd=tmp_path,
    )
    rows = rows_without_timings(run)
    assert [row["round"] for row in rows] == ["1", "2"]
    histogram = json.loads((run / "label_histogram.json").read_text())
    assert sum(map(sum, histogram.values())) == 60 and len(histogram) == 4


def test_a_lightning_datamodule_runs_through_the_cli_with_its_natural_clients(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    result = run_cli(
        "data=datamodule",
        "data.datamodule=tests.helpers.own_data.WritersData",
        "data.kwargs={batch_size:5}",
        "data.client_key=writers",
        "partition=natural",
        *SHORT,
        f"hydra.run.dir={run}",
        cwd=tmp_path,
    )
    assert "fedlight: fl.num_clients=5, the number of distinct" in result.stderr
    writers = writer_examples(train=True)[2:]
    labels = Writers(train=True).labels.numpy()[2:]
    histogram = json.loads((run / "label_histogram.json").read_text())
    assert histogram == histogram_of(labels, writer_sets(writers))


def test_the_data_target_a_user_writes_first_is_refused_with_exit_2(tmp_path: Path) -> None:
    result = run_cli("data._target_=torchvision.datasets.MNIST", cwd=tmp_path, check=False)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "fedlight: error: data._target_=torchvision.datasets.MNIST is not a fedlight data source "
        "(it has no load()); write data=torch_dataset data.dataset=torchvision.datasets.MNIST "
        "data.root=<its folder> (docs/data-and-models.md, 'Your own data')"
    )


def test_a_run_with_a_partition_function_trains_the_clients_it_returns(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    job = make_job(
        [
            *WRITERS_DATA,
            "partition=callable",
            "partition.function=tests.helpers.own_data.random_parts",
            "fl.num_clients=3",
            *SHORT,
        ]
    )
    run_job(job, tmp_path)
    assert len(rows_without_timings(tmp_path)) == 2
    histogram = json.loads((tmp_path / "label_histogram.json").read_text())
    labels = Writers(train=True).labels.numpy()
    parts = np.array_split(numpy_generator(0, Stream.PARTITION).permutation(50), 3)
    assert histogram == histogram_of(labels, [np.sort(p) for p in parts])
