"""A driver's parts used one at a time: one client's local training, one model's test metrics."""

from torch import Tensor

from fedlight.core.messages import LocalResult, ServerState
from fedlight.core.tensors import StateDict
from fedlight.drivers.base import Driver
from fedlight.drivers.evaluation import RunEvaluation
from fedlight.engines.base import LocalCallback, LocalTask
from fedlight.engines.evaluator import ACCURACY, LOSS
from fedlight.store.client_states import ClientStates


def train_client(
    driver: Driver,
    client: int,
    indices: Tensor,
    round_index: int,
    start: StateDict,
    lrs: list[float],
    callbacks: list[LocalCallback],
) -> LocalResult:
    """Local training of one participant by the driver's engine (as in a round)."""
    task = LocalTask(client, indices, start, callbacks)
    (local,) = driver.engine.train([task], round_index, lrs)
    return local


def evaluate_model(evaluation: RunEvaluation, weights: StateDict) -> tuple[float, float]:
    """Accuracy and mean cross-entropy of one model on the whole test set."""
    data = evaluation.data
    metrics = evaluation.evaluator.evaluate(weights, data.test_x, data.test_y)
    return metrics[ACCURACY], metrics[LOSS]


def evaluate(
    evaluation: RunEvaluation, server: ServerState, client_states: ClientStates, completed: int
) -> tuple[float, float, float]:
    """Mean test accuracy, mean test loss and accuracy spread of the models the run evaluates,
    after `completed` rounds."""
    metrics = evaluation.evaluate_all(server, client_states, completed).test
    return metrics[ACCURACY], metrics[LOSS], metrics["test_accuracy_std"]
