"""`privacy=none`: no privacy mechanism, no ε reported."""

from dataclasses import dataclass

from fedlight.stages.privacy.base import Privacy


@dataclass
class NoPrivacy(Privacy):
    """Every hook of `Privacy` as it is: the round runs unchanged."""
