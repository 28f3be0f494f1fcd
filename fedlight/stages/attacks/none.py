"""No attack: every client is honest (the default)."""

from dataclasses import dataclass

from fedlight.core.errors import require
from fedlight.stages.attacks.base import Attack


@dataclass
class NoAttack(Attack):
    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            self.fraction == 0 and not self.count,
            "attack=none has no malicious clients; choose an attack (e.g. attack=sign_flip) to "
            "set attack.fraction or attack.count",
        )
