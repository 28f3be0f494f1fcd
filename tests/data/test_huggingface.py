"""Hugging Face `datasets` as the data (issue 66): a dataset saved to disk with save_to_disk (in
the test, in FEMNIST's flwr-datasets columns), or one load_dataset opens, converted once into
tensors with a column as the client id; the one-line refusals; a partition=natural run through
the real CLI."""

import csv
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedlight.core.errors import ConfigError
from fedlight.data.base import DataError
from tests.conftest import REPO, run_cli
from tests.helpers.commands import validate_command_line
from tests.helpers.natural_data import (
    SPEECHES,
    WINDOW,
    windows,
    write_femnist,
    write_leaf,
    write_shakespeare,
)
from tests.project.test_readme_commands import readme_commands

datasets = pytest.importorskip("datasets")
from fedlight.data.characters import LETTERS  # noqa: E402
from fedlight.data.huggingface import HuggingFace, held_out  # noqa: E402

WRITERS = {"w07": (6, 2), "w01": (4, 1), "w12": (5, 2)}  # writer -> (training, test) examples
CLASSES = 62


def writer_split(split: int, seed: int) -> Any:
    """FEMNIST's columns as flwr-datasets publishes them: a 28×28 grey image, the writer, the
    character as a ClassLabel of 62."""
    rng = np.random.default_rng(seed)
    rows = [(w, i) for w, sizes in WRITERS.items() for i in range(sizes[split])]
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "writer_id": datasets.Value("string"),
            "character": datasets.ClassLabel(num_classes=CLASSES),
        }
    )
    return datasets.Dataset.from_dict(
        {
            "image": [rng.integers(0, 256, (28, 28), dtype=np.uint8) for _ in rows],
            "writer_id": [writer for writer, _ in rows],
            "character": rng.integers(0, CLASSES, len(rows)).tolist(),
        },
        features=features,
    )


def save_femnist(folder: Path) -> Any:
    splits = datasets.DatasetDict(train=writer_split(0, seed=0), test=writer_split(1, seed=1))
    splits.save_to_disk(str(folder))
    return splits


FEMNIST_COLUMNS = {"input_column": "image", "label_column": "character"}


def test_a_saved_dataset_gives_each_writer_a_client_and_its_own_test_examples(
    tmp_path: Path,
) -> None:
    splits = save_femnist(tmp_path / "femnist")
    data = HuggingFace(
        path=str(tmp_path / "femnist"), client_column="writer_id", **FEMNIST_COLUMNS
    ).load()
    train = splits["train"].with_format("numpy")[:]
    assert data.train_x.dtype == torch.uint8 and data.train_x.shape == (15, 1, 28, 28)
    assert torch.equal(data.train_x[:, 0], torch.from_numpy(train["image"]))
    assert data.train_y.tolist() == train["character"].tolist()
    assert data.num_classes == CLASSES  # the ClassLabel's, not the largest label + 1
    assert data.normalization is not None  # uint8 images standardized with the training set's
    pixels = torch.from_numpy(train["image"]).double() / 255
    assert data.normalization.mean == pytest.approx((pixels.mean().item(),), abs=1e-12)
    writers = sorted(WRITERS)  # client i is the i-th id in sorted order
    assert data.train_clients is not None and data.test_clients is not None
    assert [writers[c] for c in data.train_clients.tolist()] == list(train["writer_id"])
    test_writers = splits["test"]["writer_id"]
    assert [writers[c] for c in data.test_clients.tolist()] == list(test_writers)


def test_a_dataset_without_a_test_split_holds_out_a_share_of_each_client(tmp_path: Path) -> None:
    """flwr-datasets' FEMNIST has a train split alone: data.test_split=null holds out
    round(fraction · n) of each writer's n, the same examples whatever the run's seed."""
    single = writer_split(0, seed=0)
    single.save_to_disk(str(tmp_path / "single"))
    source = HuggingFace(
        path=str(tmp_path / "single"),
        test_split=None,
        test_fraction=0.25,
        client_column="writer_id",
        **FEMNIST_COLUMNS,
    )
    data = source.load()
    sizes = [WRITERS[w][0] for w in sorted(WRITERS)]  # 4, 6, 5 examples
    held = [round(0.25 * n) for n in sizes]
    assert data.test_clients is not None and data.train_clients is not None
    assert np.bincount(data.test_clients.numpy()).tolist() == held
    kept = [n - h for n, h in zip(sizes, held, strict=True)]
    assert np.bincount(data.train_clients.numpy()).tolist() == kept
    everything = held_out(None, 40, 0.25)
    assert len(everything) == 10 and len(set(everything.tolist())) == 10


def test_load_dataset_opens_a_folder_of_data_files_with_vectors_and_integer_labels(
    tmp_path: Path,
) -> None:
    """`data.name`: what datasets.load_dataset opens (a hub name from the machine's cache, or, as
    here, a local folder of parquet files named by split)."""
    folder = tmp_path / "vectors"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for split, size in (("train", 12), ("test", 5)):
        datasets.Dataset.from_dict(
            {
                "x": rng.normal(size=(size, 3)).astype(np.float32).tolist(),
                "y": rng.integers(0, 4, size).tolist(),
                "user": rng.integers(0, 3, size).tolist(),
            }
        ).to_parquet(str(folder / f"{split}.parquet"))
    data = HuggingFace(
        name=str(folder), input_column="x", label_column="y", client_column="user"
    ).load()
    assert data.train_x.dtype == torch.float32 and data.input_shape == (3,)
    assert data.normalization is None
    assert data.num_classes == int(max(data.train_y.max(), data.test_y.max())) + 1


def save_shakespeare(folder: Path) -> dict[str, Any]:
    """flwr-datasets' Shakespeare columns (character_id, x: 80 characters, y: the next one), one
    split, as it publishes them."""
    rows = {"character_id": [], "x": [], "y": []}
    for role, text in SPEECHES.items():
        role_windows = windows(text, range(0, 40, 4))
        rows["character_id"] += [role] * len(role_windows["y"])
        rows["x"] += role_windows["x"]
        rows["y"] += role_windows["y"]
    datasets.Dataset.from_dict(rows).save_to_disk(str(folder))
    return rows


TEXT = {"input_column": "x", "label_column": "y", "client_column": "character_id"}


def test_text_windows_are_read_over_leafs_vocabulary_or_a_given_one(tmp_path: Path) -> None:
    rows = save_shakespeare(tmp_path / "shakespeare")
    path = str(tmp_path / "shakespeare")
    data = HuggingFace(path=path, test_split=None, test_fraction=0.2, **TEXT).load()
    assert data.num_classes == 80 and data.train_x.dtype == torch.int64
    assert data.input_shape == (WINDOW,)
    decoded = {"".join(LETTERS[i] for i in row) for row in data.train_x.tolist()}
    decoded |= {"".join(LETTERS[i] for i in row) for row in data.test_x.tolist()}
    assert decoded == set(rows["x"])
    assert data.test_clients is not None and len(data.test_y) == 3 * 2  # 20% of each role's 10
    letters = "".join(sorted(set("".join(SPEECHES.values()))))
    own = HuggingFace(path=path, test_split=None, vocabulary=letters, **TEXT).load()
    assert own.num_classes == len(letters)
    labels = torch.cat([own.train_y, own.test_y]).tolist()
    assert sorted(letters[i] for i in labels) == sorted(rows["y"])
    message = refused(HuggingFace(path=path, test_split=None, vocabulary="abc", **TEXT))
    assert message.startswith("data=huggingface: the train split: character ")
    assert "is not in data.vocabulary='abc'" in message


def refused(source: HuggingFace) -> str:
    with pytest.raises(DataError) as caught:
        source.load()
    message = str(caught.value)
    assert "\n" not in message, message
    return message


def test_refusals_are_one_line_naming_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_femnist(tmp_path / "femnist")
    path = str(tmp_path / "femnist")
    with pytest.raises(ConfigError, match=r"^data=huggingface takes one of data.path .* neither"):
        HuggingFace()
    with pytest.raises(ConfigError, match=r"both; set one$"):
        HuggingFace(path=path, name="flwrlabs/femnist")
    assert "data.path=" in refused(HuggingFace(path=str(tmp_path / "nowhere")))
    message = refused(HuggingFace(path=path, input_column="pixels"))
    assert message.startswith("data.input_column=pixels but the train split's columns are image")
    message = refused(HuggingFace(path=path, test_split="validation", **FEMNIST_COLUMNS))
    assert "data.test_split=validation but the dataset's splits are train, test" in message
    message = refused(HuggingFace(path=path, input_column="image", label_column="writer_id"))
    assert "data.label_column=writer_id holds" in message and "class_encode_column" in message
    message = refused(HuggingFace(path=path, input_column="writer_id", label_column="character"))
    assert "the train split: inputs and labels must be strings" in message
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if it were not installed
    with pytest.raises(ConfigError) as caught:
        HuggingFace(path=path)
    assert str(caught.value) == (
        "data=huggingface needs the Hugging Face datasets package; pip install "
        "'fedlight[huggingface]' (or pip install 'datasets>=2.14')"
    )


def test_a_natural_run_of_saved_text_through_the_cli(tmp_path: Path) -> None:
    save_shakespeare(tmp_path / "shakespeare")
    run_cli(
        "data=huggingface",
        f"data.path={tmp_path / 'shakespeare'}",
        *(f"data.{key}={value}" for key, value in TEXT.items()),
        "data.test_split=null",
        "data.test_fraction=0.2",
        "model=stacked_lstm",
        "partition=natural",
        "fl.clients_per_round=2",
        "fl.rounds=1",
        "hydra.run.dir=run",
        cwd=tmp_path,
    )
    with (tmp_path / "run" / "metrics.csv").open() as f:
        (row,) = list(csv.DictReader(f))
    assert 0 <= float(row["local_accuracy_mean"]) <= 1


def test_a_natural_run_of_a_saved_dataset_through_the_cli(tmp_path: Path) -> None:
    save_femnist(tmp_path / "femnist")
    run_cli(
        "data=huggingface",
        f"data.path={tmp_path / 'femnist'}",
        "data.label_column=character",
        "data.client_column=writer_id",
        "model=femnist_cnn",
        "partition=natural",
        "fl.clients_per_round=2",
        "fl.rounds=2",
        "local.batch_size=4",
        "hydra.run.dir=run",
        cwd=tmp_path,
    )
    histogram = json.loads((tmp_path / "run" / "label_histogram.json").read_text())
    assert [sum(histogram[str(c)]) for c in range(3)] == [WRITERS[w][0] for w in sorted(WRITERS)]
    with (tmp_path / "run" / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [row["round"] for row in rows] == ["1", "2"]
    assert all(0 <= float(row["local_accuracy_mean"]) <= 1 for row in rows)


def test_the_how_to_pages_commands_are_accepted_where_its_files_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/natural-datasets.md's commands, checked as fedlight checks a command line (the data
    loaded: partition=natural counts its clients) on files written where the page puts them, with
    two clients a round (the files hold a few users)."""
    monkeypatch.chdir(tmp_path)
    write_femnist(tmp_path / "leaf/data/femnist/data")
    write_shakespeare(tmp_path / "leaf/data/shakespeare/data")
    rng = np.random.default_rng(0)
    for split, size in (("train", 6), ("test", 2)):
        devices = {
            str(d): {"x": rng.normal(size=(size, 60)).tolist(), "y": [d % 5] * size}
            for d in range(4)
        }
        write_leaf(tmp_path / f"leaf/data/synthetic/data/{split}", devices, files=1)
    save_femnist(tmp_path / "data/femnist")
    save_shakespeare(tmp_path / "data/shakespeare")
    commands = readme_commands(REPO / "docs" / "natural-datasets.md")
    assert len(commands) == 5
    for arguments in commands:
        few = [a for a in arguments if not a.startswith("fl.clients_per_round=")]
        assert validate_command_line([*few, "fl.clients_per_round=2"]), arguments
