"""Label flipping: a malicious client trains on its data with every label y replaced by
C − 1 − y (Biggio et al., ICML 2012; Tolpegin et al., ESORICS 2020, flip all classes), then
uploads honestly. A data attack: local training reads the labels through the map, the shared
dataset is never copied or changed.
"""

from dataclasses import dataclass

import torch
from torch import Tensor

from fedlight.stages.attacks.base import Attack


@dataclass
class LabelFlip(Attack):
    def label_map(self, num_classes: int, device: torch.device) -> Tensor | None:
        return torch.arange(num_classes - 1, -1, -1, device=device)
