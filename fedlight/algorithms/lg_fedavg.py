"""LG-FedAvg of Liang et al., "Think Locally, Act Globally: Federated Learning with Local and
Global Representations", 2020: FedPer's split the other way round. Each client keeps its local
representation (every layer but the last `global_last`, or the layers named) and the global head
is averaged; everything else is as in `fedper`.
"""

from dataclasses import dataclass

from fedlight.algorithms.fedper import FedPer


@dataclass
class LGFedAvg(FedPer):
    global_last: int = 1  # the layers shared (the head) when personal_layers is empty

    def personal_of(self, layers: list[str]) -> list[str]:
        if self.personal_layers:
            return list(self.personal_layers)
        return layers[: -self.global_last] if self.global_last > 0 else layers

    def option_setting(self) -> str:
        if self.personal_layers:
            return f"algo.personal_layers={self.personal_layers}"
        return f"algo.global_last={self.global_last}"
