"""Google's dp-accounting, the independent check of fedlight's accountants (tests only).

It imports absl-py, whose logging handler is made at import with the stream `sys.stderr` is then
(in a test session, pytest's capture) and closes that stream when logging is reconfigured, unless
it is `sys.stderr` at that moment: Hydra reconfigures logging in every in-process CLI test, so a
later test's capture would be closed under it. The handler gets a stream of its own.
"""

import io

import dp_accounting
from absl import logging as absl_logging
from dp_accounting.pld.pld_privacy_accountant import PLDAccountant
from dp_accounting.rdp.rdp_privacy_accountant import RdpAccountant

absl_logging.get_absl_handler().python_handler.setStream(io.StringIO())

PLD_INTERVAL = 1e-3  # the PLD's discretization: its ε is pessimistic by about this much at most


def sampled_gaussian(q: float, z: float, steps: int) -> dp_accounting.DpEvent:
    """`steps` rounds of the Gaussian mechanism of multiplier z on a Poisson sample of rate q."""
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z)), steps
    )


def pld_epsilon(q: float, z: float, steps: int, delta: float) -> float:
    """ε(δ) by dp-accounting's privacy-loss-distribution accountant."""
    accountant = PLDAccountant(value_discretization_interval=PLD_INTERVAL)
    accountant.compose(sampled_gaussian(q, z, steps))
    return accountant.get_epsilon(delta)


__all__ = ["PLD_INTERVAL", "RdpAccountant", "pld_epsilon", "sampled_gaussian"]
