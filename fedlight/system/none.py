"""`system=none`: no system model and no virtual clock (the default)."""

from fedlight.system.base import System as NoSystem

__all__ = ["NoSystem"]
