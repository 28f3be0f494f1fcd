"""ε from Opacus's accountants, never from a formula of ours (`privacy.accountant`).

A round of user-level DP-FedAvg (McMahan et al., "Learning Differentially Private Recurrent
Language Models", ICLR 2018) and a step of DP-SGD (Abadi et al., CCS 2016) are the same event: a
Gaussian mechanism of noise multiplier z on a Poisson sample of rate q. Steps compose. Opacus
accounts for both levels because fedlight already needs it for DP-SGD, and it pulls in nothing
that reconfigures logging (Google's dp-accounting brings absl-py; the tests use it as the
independent check). Two accountants:

- `prv`: the privacy-loss random variable's numerical composition (Gopi, Lee & Wutschitz,
  "Numerical Composition of Differential Privacy", NeurIPS 2021), Opacus's `PRVAccountant`. Its ε
  is the upper end of an interval of width 2·PRV_EPS_ERROR (0.01 each side) around the estimate,
  so it is a bound, near-tight: at q = 0.1, z = 1, δ = 0.01 it gives 0.208 after 1 step and 0.447
  after 3, where the exact privacy-loss distribution gives 0.198 and 0.437 and RDP 0.649 and
  0.884 (2–3× looser after few steps, about 30% after 50 and 15% after 500); at q = 0.004,
  z = 1.1, 15,000 steps, δ = 10⁻⁵ (DP-SGD's standard setting) 2.306 against the exact 2.295 (the
  privacy-loss distribution, converged) and RDP's 2.50. One evaluation takes 0.3–1 s for grids up
  to a million points (mostly the RDP bounds Opacus sizes its grid with), so ε is cached per
  (q, z, steps, δ). RDP's bound, valid too, is reported where it is the smaller: at ε of a few
  hundredths, where PRV's error width dominates (q = 0.01, z = 5, 100 steps: RDP 0.0691, PRV
  0.0713), and where PRV has none: its grid would exceed PRV_MAX_POINTS (ε in the hundreds, or
  hundreds of thousands of steps at z below 1), or it finds no ε on it or cannot discretize (z ≈
  0.05 and below); `Spent` names the accountant whose bound it is.
- `rdp`: Rényi DP (Mironov 2017; Mironov, Talwar & Zhang 2019 for the sampled Gaussian), exact
  to compute for any number of steps, in a fraction of PRV's time; the Rényi orders are the
  library's defaults extended with the integers up to 256 (small ε after few steps is tightest at
  orders above the defaults' 63).

Calibration inverts the configured accountant by bisection on the noise multiplier (Opacus's
`get_noise_multiplier` algorithm, on `epsilon` so that the PRV grid limit applies there too).
"""

import math
import warnings
from collections.abc import Callable
from functools import cache
from typing import NamedTuple

import numpy as np
from opacus.accountants import PRVAccountant, RDPAccountant
from opacus.accountants.analysis import rdp
from opacus.accountants.analysis.prv import (
    PoissonSubsampledGaussianPRV,
    TruncatedPrivacyRandomVariable,
    compose_heterogeneous,
    discretize,
)

from fedlight.core.errors import require

ORDERS = (*RDPAccountant.DEFAULT_ALPHAS, *range(64, 257))
CALIBRATION_TOLERANCE = 0.005  # calibrated ε lies within this of the target, below it
PRV_EPS_ERROR = 0.01  # Opacus's default: the PRV estimate's error bound in ε
PRV_MAX_POINTS = 3_000_000  # a larger PRV grid (over 5 s and 200 MB an evaluation) is not built
MAX_NOISE = 1e6  # calibration gives up above this multiplier (Opacus's MAX_SIGMA)


class Spent(NamedTuple):
    """ε(δ), and the accountant that computed it (`prv`, or `rdp` where PRV has no bound)."""

    epsilon: float
    accountant: str


def rdp_epsilon(sampling_rate: float, noise_multiplier: float, steps: int, delta: float) -> Spent:
    """The RDP accountant's ε(δ) after `steps` steps."""
    orders = list(ORDERS)
    spent = rdp.compute_rdp(
        q=sampling_rate, noise_multiplier=noise_multiplier, steps=steps, orders=orders
    )
    eps, _ = rdp.get_privacy_spent(orders=orders, rdp=spent, delta=delta)
    return Spent(float(eps), "rdp")


def prv_epsilon(sampling_rate: float, noise_multiplier: float, steps: int, delta: float) -> float:
    """The PRV accountant's upper bound on ε(δ) after `steps` steps, built as Opacus's
    `PRVAccountant.get_epsilon` builds it (its default δ error, δ/1000) once its grid is known to
    fit; ∞ where the grid would exceed PRV_MAX_POINTS or the arithmetic overflows (tiny noise)."""
    prv = PoissonSubsampledGaussianPRV(sampling_rate, noise_multiplier)
    delta_error = delta / 1000
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        # the grid's RDP sizing at orders it finds too few, exp overflowing for tiny noise (∞)
        warnings.simplefilter("ignore")
        domain = PRVAccountant()._get_domain(
            prvs=[prv],
            num_self_compositions=[steps],
            eps_error=PRV_EPS_ERROR,
            delta_error=delta_error,
        )
        if domain.size > PRV_MAX_POINTS:
            return math.inf
        try:  # "cannot compute epsilon" at the grid's edge; a discretization off its mean
            truncated = TruncatedPrivacyRandomVariable(prv, domain.t_min, domain.t_max)
            composed = compose_heterogeneous([discretize(truncated, domain)], [steps])
            _, _, upper = composed.compute_epsilon(delta, delta_error, PRV_EPS_ERROR)
        except (ValueError, RuntimeError):
            return math.inf
    return float(upper) if math.isfinite(upper) else math.inf


def bounded_prv_epsilon(
    sampling_rate: float, noise_multiplier: float, steps: int, delta: float
) -> Spent:
    """`privacy.accountant=prv`: the smaller of PRV's and RDP's bounds, both valid (RDP's where
    PRV has none, or at tiny ε where PRV's fixed error width makes it the looser)."""
    bound = prv_epsilon(sampling_rate, noise_multiplier, steps, delta)
    other = rdp_epsilon(sampling_rate, noise_multiplier, steps, delta)
    return Spent(bound, "prv") if bound <= other.epsilon else other


ACCOUNTANTS: dict[str, Callable[[float, float, int, float], Spent]] = {
    "prv": bounded_prv_epsilon,
    "rdp": rdp_epsilon,
}


@cache
def spent(
    sampling_rate: float, noise_multiplier: float, steps: int, delta: float, accountant: str
) -> Spent:
    """ε(δ) after `steps` steps by `accountant` (∞ without noise; 0 after no step), and the
    accountant that computed it."""
    if steps == 0:
        return Spent(0.0, accountant)
    if noise_multiplier == 0:
        return Spent(math.inf, accountant)
    bound = ACCOUNTANTS[accountant](sampling_rate, noise_multiplier, steps, delta)
    # The conversions (Balle et al. 2020) can go below 0 for tiny ε: (0, δ)-DP holds.
    return bound._replace(epsilon=max(0.0, bound.epsilon))


def epsilon(
    sampling_rate: float, noise_multiplier: float, steps: int, delta: float, accountant: str
) -> float:
    """ε(δ) after `steps` steps by `accountant` (`spent`'s number)."""
    return spent(sampling_rate, noise_multiplier, steps, delta, accountant).epsilon


def calibrate_noise(
    sampling_rate: float, steps: int, target_epsilon: float, delta: float, accountant: str
) -> float:
    """The noise multiplier whose `steps` steps stay within (target ε, δ) by `accountant`: the
    smallest found by bisection, its ε within CALIBRATION_TOLERANCE below the target."""
    low, high = 0.0, 10.0
    reached = math.inf
    while reached > target_epsilon:
        high *= 2
        require(
            high <= MAX_NOISE,
            f"privacy.target_epsilon={target_epsilon}: no noise multiplier up to {MAX_NOISE:g} "
            f"keeps {steps} steps within it at delta={delta:.3g}; raise it",
        )
        reached = epsilon(sampling_rate, high, steps, delta, accountant)
    while target_epsilon - reached > CALIBRATION_TOLERANCE:
        middle = (low + high) / 2
        spent = epsilon(sampling_rate, middle, steps, delta, accountant)
        if spent < target_epsilon:
            high, reached = middle, spent
        else:
            low = middle
    return high
