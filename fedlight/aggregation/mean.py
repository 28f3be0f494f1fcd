"""Weighted mean of client updates, the aggregation of FedAvg (McMahan et al. 2017)."""

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fedlight.tensors import StateDict


@dataclass
class WeightedMean:
    """Σ_i w_i u_i / Σ_i w_i, summed in the order given so results are bit-reproducible."""

    def __call__(self, updates: Sequence[StateDict], weights: Sequence[float]) -> StateDict:
        total = float(sum(weights))
        result: StateDict = {}
        for name, first in updates[0].items():
            acc = torch.zeros_like(
                first, dtype=torch.float64 if first.dtype == torch.float64 else torch.float32
            )
            for update, weight in zip(updates, weights, strict=True):
                acc.add_(update[name], alpha=weight / total)
            result[name] = acc
        return result
