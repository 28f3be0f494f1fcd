"""What a run evaluates: the models the algorithm reports on the test set, each client's model on
its local test set (after optional fine-tuning), and a model on a client's training data for a
selector's questions. Both drivers evaluate through it; the round loop calls it on the rounds
due (`eval.every`, `eval.every_seconds`).
"""

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import pytorch_lightning as pl
import torch
from torch import Tensor

from fedlight.algorithms.base import Algorithm
from fedlight.core.context import Federation
from fedlight.core.messages import ClientState, ServerState
from fedlight.core.tensors import StateDict, detached_copy
from fedlight.data.base import TensorDataset
from fedlight.engines.base import Engine, LocalTask
from fedlight.engines.evaluator import ACCURACY, LOSS, SPLIT_METRICS, VALIDATION_PREFIX, Evaluator
from fedlight.stages.pool import ModelQuality
from fedlight.store.client_states import ClientStates


@dataclass
class RunEvaluation:
    """The run's evaluations; `finetune_engine` trains a copy of a client's model before its
    local test (`eval.finetune_epochs`), None without."""

    module: pl.LightningModule
    data: TensorDataset
    batch_size: int
    algorithm: Algorithm
    federation: Federation
    client_indices: Sequence[Tensor]
    client_test_indices: Sequence[Tensor] | None
    finetune_engine: Engine | None
    base_lrs: list[float]
    client_validation_indices: Sequence[Tensor] | None = None
    # each client's global test examples of the labels its training part holds (eval.own_labels)
    own_label_indices: Sequence[Tensor] | None = None
    train_loss: bool = False  # the run's model on every client's training examples too

    def __post_init__(self) -> None:
        data = self.data
        self.evaluator = Evaluator(self.module, self.batch_size, data.prepare, data.num_classes)

    def evaluate_all(
        self,
        server: ServerState,
        client_states: ClientStates,
        completed_rounds: int,
        test: bool = True,
    ) -> "Evaluated":
        """Every metric of the models the algorithm reports (the global model, or each client's
        own for `local`, evaluated as they stream in, one at a time) on the test set (`test`) and
        on the validation set (where the run has one), averaged over the models, with the
        population std of their accuracies (`test_accuracy_std`, `val_accuracy_std`); and with
        `test`, each client's local test accuracy (None without local test sets) and, with
        `eval.own_labels`, each client's model on the global test examples of its own labels
        (`local_accuracy_own_labels_*`)."""
        states = AlgorithmStates(client_states)
        models = self.algorithm.evaluated_models(self.federation, server, states)
        splits = self.splits(test)
        results = [self.evaluate_on(weights, splits) for weights in models]
        means = {name: model_mean([r[name] for r in results], name) for name in splits}
        tested, validated = means.get("test", {}), means.get("validation", {})
        parts = self.local_parts(test)
        local = self.local_accuracies(server, states, completed_rounds, parts) if parts else {}
        if test and self.train_loss:
            tested |= self.on_training_data(server, client_states)
        tested |= local_accuracy_summary(local.get("test", []))
        tested |= local_accuracy_summary(local.get("own_labels", []), "local_accuracy_own_labels")
        validated |= local_accuracy_summary(
            local.get("validation", []), validation_name("local_accuracy")
        )
        return Evaluated(tested, validated, local.get("test"))

    def local_parts(self, test: bool) -> dict[str, "LocalPart"]:
        """The clients' local sets a round's evaluation covers: their test sets if `test`, their
        validation parts, where the run has them, and with `test` the global test examples of
        each client's own labels (`eval.own_labels`)."""
        data = self.data
        parts = {
            "test": LocalPart(data.train_x, data.train_y, self.client_test_indices),
            "validation": LocalPart(data.train_x, data.train_y, self.client_validation_indices),
            "own_labels": LocalPart(data.test_x, data.test_y, self.own_label_indices),
        }
        return {
            name: part
            for name, part in parts.items()
            if part.indices is not None and (test or name == "validation")
        }

    def splits(self, test: bool) -> dict[str, tuple[Tensor, Tensor]]:
        """The sets a round's evaluation covers: the test set if `test`, then the validation set
        if the run has one (test first: its numbers are those of a run without validation)."""
        data = self.data
        splits = {"test": (data.test_x, data.test_y)} if test else {}
        if data.val_x is not None and data.val_y is not None:
            splits["validation"] = (data.val_x, data.val_y)
        return splits

    def evaluate_on(
        self, weights: StateDict, splits: dict[str, tuple[Tensor, Tensor]]
    ) -> dict[str, dict[str, float]]:
        """One model's metrics on each of the `splits` (the module's `test_step` on the test set,
        its `validation_step` on the validation set)."""
        return {
            name: self.evaluator.evaluate(weights, x, y, name) for name, (x, y) in splits.items()
        }

    def on_training_data(
        self, server: ServerState, client_states: ClientStates
    ) -> dict[str, float]:
        """`global_train_loss` and `global_train_accuracy`: the run's model (`final_model`) on
        every client's training examples, the global training loss of FedProx's figures (Li et
        al., MLSys 2020; the authors' `train_error_and_loss`, weighted by examples)."""
        indices = torch.cat(list(self.client_indices))
        x, y = self.data.train_x[indices], self.data.train_y[indices]
        metrics = self.evaluator.evaluate(self.final_model(server, client_states), x, y)
        return {"global_train_loss": metrics[LOSS], "global_train_accuracy": metrics[ACCURACY]}

    def final_model(self, server: ServerState, client_states: ClientStates) -> StateDict:
        """The model the run exports (`Algorithm.global_model`)."""
        return self.algorithm.global_model(self.federation, server, AlgorithmStates(client_states))

    def local_accuracies(
        self,
        server: ServerState,
        states: "AlgorithmStates",
        completed_rounds: int,
        parts: dict[str, "LocalPart"],
    ) -> dict[str, list[float]]:
        """Each client's accuracy, with the model it would use (fine-tuned on its training part
        for `eval.finetune_epochs` first, if set, once for all its parts), on each of its local
        `parts` (by name; nan for a client without data there); one client's model at a time, so
        a disk store streams."""
        accuracies: dict[str, list[float]] = {name: [] for name in parts}
        for client in range(len(self.client_indices)):
            weights = None
            for name, part in parts.items():
                assert part.indices is not None
                indices = part.indices[client]
                if len(indices) == 0:
                    accuracies[name].append(math.nan)
                    continue
                if weights is None:
                    weights = self.model_to_test(server, states, client, completed_rounds)
                x, y = part.x[indices], part.y[indices]
                split = "validation" if name == "validation" else "test"
                accuracy = SPLIT_METRICS[split][0]
                accuracies[name].append(self.evaluator.evaluate(weights, x, y, split)[accuracy])
        return accuracies

    def model_to_test(
        self, server: ServerState, states: "AlgorithmStates", client: int, completed_rounds: int
    ) -> StateDict:
        """The model `client` would use, fine-tuned first where `eval.finetune_epochs` says."""
        weights = self.algorithm.model_of_client(self.federation, server, states, client)
        if self.finetune_engine is not None:
            weights = self.fine_tuned(client, weights, completed_rounds)
        return weights

    def fine_tuned(self, client: int, weights: StateDict, completed_rounds: int) -> StateDict:
        """A copy of `weights` after the client's fine-tuning epochs on its training part at the
        configured learning rates (the global model and the client's state are not touched)."""
        assert self.finetune_engine is not None
        task = LocalTask(client, self.client_indices[client], weights, [])
        (tuned,) = self.finetune_engine.train([task], completed_rounds, self.base_lrs)
        return detached_copy(tuned.weights)

    def quality_on(self, weights: StateDict, indices: Tensor) -> ModelQuality:
        """Loss and accuracy of `weights` on the training examples `indices` (a client's)."""
        x, y = self.data.train_x[indices], self.data.train_y[indices]
        metrics = self.evaluator.evaluate(weights, x, y)
        return ModelQuality(metrics[LOSS], metrics[ACCURACY])


@dataclass(frozen=True)
class LocalPart:
    """Examples a client's model is evaluated on: `indices[client]` into `x`, `y` (the training
    pool for the clients' local test and validation parts, the test set for their own labels)."""

    x: Tensor
    y: Tensor
    indices: Sequence[Tensor] | None


@dataclass(frozen=True)
class Evaluated:
    """A round's evaluation: its test metrics (empty where the round does not test, `eval.test`),
    its validation metrics (named `val_*`; empty without a validation set) and each client's
    local test accuracy (None without local test sets, or where the round does not test)."""

    test: dict[str, float]
    validation: dict[str, float]
    local: list[float] | None = None


def model_mean(results: Sequence[dict[str, float]], split: str = "test") -> dict[str, float]:
    """Each metric's mean over the evaluated models (in the order they first name it), and
    `test_accuracy_std` (`val_accuracy_std`), the population std of their accuracies."""
    accuracy = SPLIT_METRICS[split][0]
    accuracies = torch.tensor([r[accuracy] for r in results], dtype=torch.float64)
    count = len(results)
    names = list(dict.fromkeys(name for result in results for name in result))
    mean = {name: sum(r[name] for r in results) / count for name in names}
    return mean | {f"{accuracy}_std": accuracies.std(correction=0).item()}


def validation_name(name: str) -> str:
    """A validation column of fedlight's own: `local_accuracy` → `val_local_accuracy`."""
    return VALIDATION_PREFIX + name.removeprefix("test_")


class AlgorithmStates(Mapping[int, StateDict]):
    """The algorithm's part of each client's state (entries outside any stage's namespace), as
    the algorithm's `evaluated_models` reads it; clients holding none of it are absent."""

    def __init__(self, states: ClientStates) -> None:
        self.states = states

    def __getitem__(self, client: int) -> StateDict:
        # Mapping's `get` and `in` come through here: a (disk) state is read and parsed once
        own = ClientState.of(self.states[client]).algorithm
        if own is None:
            raise KeyError(client)
        return own

    def __iter__(self) -> Iterator[int]:
        return (client for client in self.states if client in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def local_accuracy_summary(
    accuracies: Sequence[float], prefix: str = "local_accuracy"
) -> dict[str, float]:
    """Mean, 10th percentile (linear interpolation) and population std of the clients' local test
    accuracies, over the clients that have local test data, named `<prefix>_mean` etc."""
    tested = torch.tensor([a for a in accuracies if not math.isnan(a)], dtype=torch.float64)
    if not len(tested):
        return {}
    return {
        f"{prefix}_mean": tested.mean().item(),
        f"{prefix}_p10": torch.quantile(tested, 0.1).item(),
        f"{prefix}_std": tested.std(correction=0).item(),
    }
