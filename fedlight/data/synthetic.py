"""Synthetic(α, β) of Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020
(Section 5.1 and Appendix C.1), generated from the run's seed: no file needed.

Device k draws its samples from a multinomial logistic model of its own:

    y = argmax(softmax(W_k x + b_k)),  x ∈ R^60,  W_k ∈ R^(10×60),  b_k ∈ R^10,
    W_k, b_k ~ N(u_k, 1) entrywise,  u_k ~ N(0, α);  x ~ N(v_k, Σ),  Σ_jj = j^(−1.2),
    v_k ~ N(B_k, 1) entrywise,  B_k ~ N(0, β).

α moves the devices' models apart, β their inputs. The IID variant (`iid: true`) gives every
device the same W, b ~ N(0, 1) and x ~ N(0, Σ). As in the authors' generator
(data/synthetic_*/generate_synthetic.py and synthetic_iid/generate_iid.py): α and β are standard
deviations (numpy's `normal(0, alpha)`), b_k shares u_k with W_k, device sizes follow a power law,
int(lognormal(4, 2)) + 50 examples, and each device's examples are shuffled and split 90/10 into
its training and test parts; the test set is the union of the test parts, so test accuracy is the
authors' (correct predictions over all devices' test examples). LEAF's own synthetic generator
(TalwalkarLab/leaf, data/synthetic) is another process, with model clusters; this is FedProx's.

Randomness: what the devices share (their sizes, u_k, B_k, the IID model) comes from the
generator of (seed, DATA, 0, 0), device k's own draws from (seed, DATA, 1, k); `seed` is the
run's (`${seed}` in the YAML) unless set, so each seed of a sweep is a fresh draw of the dataset.
Each training example's device is its client id: `partition=natural` makes device k client k.
"""

from dataclasses import dataclass

import numpy as np
import torch

from fedlight.core.errors import require
from fedlight.core.rng import Stream, numpy_generator
from fedlight.data.base import TensorDataset

FEATURES = 60
CLASSES = 10
TRAIN_SHARE = 0.9  # of each device's examples; the rest are its test part


@dataclass(frozen=True)
class Device:
    """One device's examples: inputs and labels."""

    x: np.ndarray
    y: np.ndarray


@dataclass
class Synthetic:
    alpha: float = 0.0  # std of u_k, the mean of device k's model
    beta: float = 0.0  # std of B_k, the mean of device k's input mean
    iid: bool = False  # true: one model and one input distribution for every device
    num_devices: int = 30
    seed: int = 0  # the YAML's ${seed}

    def __post_init__(self) -> None:
        require(
            self.alpha >= 0 and self.beta >= 0,
            f"data.alpha={self.alpha} and data.beta={self.beta} must be >= 0 (standard deviations)",
        )
        require(
            not self.iid or self.alpha == self.beta == 0,
            f"data.iid=true gives every device one model and x ~ N(0, Σ); data.alpha={self.alpha} "
            f"and data.beta={self.beta} must stay 0",
        )
        require(self.num_devices >= 1, f"data.num_devices={self.num_devices} must be >= 1")

    def devices(self) -> list[Device]:
        """Every device's examples, in device order."""
        shared = numpy_generator(self.seed, Stream.DATA)
        sizes = shared.lognormal(4, 2, self.num_devices).astype(np.int64) + 50
        u = shared.normal(0, self.alpha, self.num_devices)
        b_means = shared.normal(0, self.beta, self.num_devices)
        common = (shared.normal(0, 1, (FEATURES, CLASSES)), shared.normal(0, 1, CLASSES))
        scale = np.arange(1, FEATURES + 1, dtype=np.float64) ** -0.6  # √Σ_jj
        found = []
        for k in range(self.num_devices):
            own = numpy_generator(self.seed, Stream.DATA, 1, k)
            if self.iid:
                mean, (w, b) = np.zeros(FEATURES), common
            else:
                mean = own.normal(b_means[k], 1, FEATURES)
                w = own.normal(u[k], 1, (FEATURES, CLASSES))
                b = own.normal(u[k], 1, CLASSES)
            x = mean + own.standard_normal((sizes[k], FEATURES)) * scale
            y = np.argmax(x @ w + b, axis=1)  # softmax is monotone: the same argmax
            order = own.permutation(sizes[k])
            found.append(Device(x[order], y[order]))
        return found

    def load(self) -> TensorDataset:
        train, test, owners = [], [], []
        for k, device in enumerate(self.devices()):
            cut = int(TRAIN_SHARE * len(device.y))
            train.append(Device(device.x[:cut], device.y[:cut]))
            test.append(Device(device.x[cut:], device.y[cut:]))
            owners.append(np.full(cut, k))
        return TensorDataset(
            torch.from_numpy(np.concatenate([d.x for d in train])).float(),
            torch.from_numpy(np.concatenate([d.y for d in train])),
            torch.from_numpy(np.concatenate([d.x for d in test])).float(),
            torch.from_numpy(np.concatenate([d.y for d in test])),
            CLASSES,
            train_clients=torch.from_numpy(np.concatenate(owners)),
        )
