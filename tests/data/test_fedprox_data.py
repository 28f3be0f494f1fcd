"""FedProx's datasets (Li et al., MLSys 2020; issue 66 item 3): Synthetic(α, β) drawn from the
seed as the paper defines it, and MNIST dealt to devices of two digits with power-law sizes; both
through the real loaders and, under `partition=natural`, one client per device through the CLI."""

import csv
import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from fedlight.core.errors import ConfigError
from fedlight.core.rng import Stream, numpy_generator
from fedlight.data.digits import Digits
from fedlight.data.fedprox_mnist import FedProxMNIST, standardized
from fedlight.data.synthetic import Synthetic
from fedlight.models.logistic import Logistic
from fedlight.runs.experiment import run_job
from fedlight.runs.job import Job
from tests.conftest import TINY, run_cli
from tests.data.test_data import write_idx


def test_synthetic_has_the_papers_shape_sizes_and_split() -> None:
    data = Synthetic(alpha=0.5, beta=0.5, num_devices=30, seed=0).load()
    assert data.input_shape == (60,) and data.num_classes == 10
    owners = data.train_clients.numpy()
    train = np.bincount(owners, minlength=30)
    sizes = numpy_generator(0, Stream.DATA).lognormal(4, 2, 30).astype(int) + 50  # the paper's
    assert train.tolist() == [int(0.9 * n) for n in sizes]
    assert len(data.test_y) == int(sum(sizes - (0.9 * sizes).astype(int)))
    assert set(data.train_y.unique().tolist()) <= set(range(10))


def test_each_synthetic_device_labels_by_argmax_of_its_own_linear_model() -> None:
    """y = argmax(W_k x + b_k) with W_k, b_k ~ N(u_k, 1), u_k ~ N(0, α); the IID variant shares
    one W, b ~ N(0, 1) and x ~ N(0, Σ): each device's labels are recovered exactly."""
    for iid, alpha in ((False, 1.0), (True, 0.0)):
        source = Synthetic(alpha=alpha, beta=alpha, iid=iid, num_devices=4, seed=5)
        shared = numpy_generator(5, Stream.DATA)
        shared.lognormal(4, 2, 4)
        u, _ = shared.normal(0, alpha, 4), shared.normal(0, alpha, 4)
        common = (shared.normal(0, 1, (60, 10)), shared.normal(0, 1, 10))
        for k, device in enumerate(source.devices()):
            own = numpy_generator(5, Stream.DATA, 1, k)
            if iid:
                w, b = common
            else:
                own.normal(0, 1, 60)  # the mean of its inputs
                w, b = own.normal(u[k], 1, (60, 10)), own.normal(u[k], 1, 10)
            assert (np.argmax(device.x @ w + b, axis=1) == device.y).all()
    iid = Synthetic(iid=True, num_devices=4, seed=5).devices()
    means = np.stack([d.x.mean(0) for d in iid])
    assert abs(means).mean() < 0.2  # x ~ N(0, Σ) on every device


def test_synthetic_is_drawn_from_the_seed() -> None:
    first, again = Synthetic(1.0, 1.0, seed=3).load(), Synthetic(1.0, 1.0, seed=3).load()
    assert torch.equal(first.train_x, again.train_x) and torch.equal(first.test_y, again.test_y)
    other = Synthetic(1.0, 1.0, seed=4).load()
    assert len(other.train_y) != len(first.train_y) or not torch.equal(other.train_y, first.train_y)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"iid": True, "alpha": 0.5}, "data.iid=true gives every device one model"),
        ({"alpha": -1.0}, "data.alpha=-1.0 and data.beta=0.0 must be >= 0"),
        ({"num_devices": 0}, "data.num_devices=0 must be >= 1"),
    ],
)
def test_bad_synthetic_settings_are_one_line(settings: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        Synthetic(**settings)


def test_a_synthetic_run_has_one_client_per_device_and_the_global_training_loss(
    tmp_path: Path,
) -> None:
    run_cli(
        "data=synthetic",
        "partition=natural",
        "data.num_devices=6",
        "fl.clients_per_round=4",
        "fl.rounds=2",
        "local.epochs=2",
        "local.batch_size=100",
        "local_work=stragglers",
        "local_work.fraction=0.5",
        "local_work.drop=true",
        "eval.train_loss=true",
        "fl.workers=1",
        f"hydra.run.dir={tmp_path}",
        cwd=tmp_path,
    )
    rows = list(csv.DictReader((tmp_path / "metrics.csv").open()))
    assert summary(tmp_path)["config"]["fl"]["num_clients"] == 6
    for row in rows:
        assert (row["participants"], row["slow_clients"], row["slow_dropped"]) == ("2.0",) * 3
        assert row["local_epochs_mean"] == "2.0"  # the two that train run E
        assert 0 < float(row["global_train_loss"]) and 0 <= float(row["global_train_accuracy"])


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


# ------------------------------------------------------------------------- FedProx's MNIST

PER_DIGIT = 30  # a fixture of 300 images: 30 of each digit over both splits


def write_digits(root: Path) -> np.ndarray:
    """MNIST's IDX files: 240 training and 60 test images, labels 0-9 in turn; pixel values
    vary by image and position."""
    count = 10 * PER_DIGIT
    i, r, c = np.meshgrid(np.arange(count), np.arange(28), np.arange(28), indexing="ij")
    images = ((11 * i + 3 * r * (i % 7) + 5 * c) % 256).astype(np.uint8)
    labels = np.arange(count) % 10
    raw = root / "MNIST" / "raw"
    write_idx(raw / "train-images-idx3-ubyte", images[:240])
    write_idx(raw / "train-labels-idx1-ubyte", labels[:240])
    write_idx(raw / "t10k-images-idx3-ubyte", images[240:])
    write_idx(raw / "t10k-labels-idx1-ubyte", labels[240:])
    return images


def test_each_device_holds_two_digits_of_power_law_sizes(tmp_path: Path) -> None:
    images = write_digits(tmp_path)
    source = FedProxMNIST(root=str(tmp_path), download=False, num_devices=20, seed=0)
    held = source.deal(np.arange(len(images)) % 10)
    for u, indices in enumerate(held):
        assert set((indices % 10).tolist()) == {u % 10, (u + 1) % 10}
        assert len(indices) >= 10  # 5 of each digit first
    dealt = np.concatenate(held)
    assert len(set(dealt.tolist())) == len(dealt) <= len(images)  # no image twice
    data = source.load()
    assert data.num_classes == 10 and data.train_x.shape[1:] == (1, 28, 28)
    owners = np.bincount(data.train_clients.numpy(), minlength=20)
    assert owners.tolist() == [int(0.9 * len(indices)) for indices in held]
    assert len(data.train_y) + len(data.test_y) == len(dealt)
    pool = torch.from_numpy(images).flatten(1).double()
    by_hand = (pool - pool.mean(0)) / (pool.std(0, correction=0) + 0.001)
    # float32 rounding of the mean and of x − mean (pixels ≤ 255), over a std of tens
    found = standardized(torch.from_numpy(images).flatten(1))
    assert torch.allclose(found, by_hand.float(), rtol=0, atol=1e-6)


def test_too_few_images_of_a_digit_is_one_line(tmp_path: Path) -> None:
    write_digits(tmp_path)
    source = FedProxMNIST(root=str(tmp_path), download=False, num_devices=40, seed=0)
    with pytest.raises(
        ConfigError, match=re.escape("needs 40 images of every digit and the MNIST files hold 30")
    ):
        source.load()
    with pytest.raises(
        ConfigError, match=re.escape("data.num_devices=15 must be a positive multiple of 10")
    ):
        FedProxMNIST(num_devices=15)


def test_a_fedprox_mnist_run_has_one_client_per_device(tmp_path: Path) -> None:
    write_digits(tmp_path)
    run_cli(
        "data=fedprox_mnist",
        "partition=natural",
        f"data.root={tmp_path}",
        "data.download=false",
        "data.num_devices=20",
        "fl.clients_per_round=5",
        "fl.rounds=1",
        "fl.workers=1",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    ran = summary(tmp_path / "run")
    assert ran["config"]["fl"]["num_clients"] == 20
    assert (ran["model"], ran["partition"]) == ("logistic", "natural")


# ------------------------------------------------------------- the model and the training loss


def test_logistic_regression_is_one_linear_layer_started_as_the_authors_tensorflow() -> None:
    model = Logistic(input_shape=(60,), num_classes=10, lr=0.01)
    (linear,) = [m for m in model.net if isinstance(m, torch.nn.Linear)]
    assert (linear.in_features, linear.out_features) == (60, 10)
    assert not linear.bias.any()  # zero bias
    bound = (6 / (60 + 10)) ** 0.5  # Glorot-uniform
    assert linear.weight.abs().max() <= bound and linear.weight.abs().max() > bound / 2
    x = torch.randn(4, 60)
    assert torch.equal(model(x), x @ linear.weight.T)


def test_the_global_training_loss_is_the_models_loss_on_every_clients_examples(
    make_job: Callable[[list[str]], Job], tmp_path: Path
) -> None:
    job = make_job([*TINY, "model=logistic", "fl.rounds=1", "eval.train_loss=true"])
    run_job(job, tmp_path)
    (row,) = list(csv.DictReader((tmp_path / "metrics.csv").open()))
    data = Digits().load()  # every training example is some client's (partition=iid)
    model = Logistic(input_shape=data.input_shape, num_classes=10, lr=0.05)
    model.load_state_dict(torch.load(tmp_path / "model.pt"))
    with torch.no_grad():
        logits = model(data.train_x)
    loss = torch.nn.functional.cross_entropy(logits, data.train_y).item()
    accuracy = (logits.argmax(1) == data.train_y).double().mean().item()
    # batches of eval.batch_size summed in float32: rounding, far below 1e-5 relative
    assert float(row["global_train_loss"]) == pytest.approx(loss, rel=1e-5)
    assert float(row["global_train_accuracy"]) == pytest.approx(accuracy, abs=1e-12)
