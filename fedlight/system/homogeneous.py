"""`system=homogeneous`: every client at the base speeds."""

from dataclasses import dataclass
from typing import ClassVar

from fedlight.system.base import System


@dataclass
class Homogeneous(System):
    clocked: ClassVar[bool] = True
