"""ε from Opacus's Rényi-DP accountant, never from a formula of ours.

A round of user-level DP-FedAvg (McMahan et al., "Learning Differentially Private Recurrent
Language Models", ICLR 2018) and a step of DP-SGD (Abadi et al., CCS 2016) are the same event: a
Gaussian mechanism of noise multiplier z on a Poisson sample of rate q. Steps compose. Opacus's
accountant is used because fedlight already needs Opacus for DP-SGD, so one library accounts for
both levels, and because it pulls in nothing that reconfigures logging (Google's dp-accounting
brings absl-py). The RDP accountant (Mironov 2017; Mironov, Talwar & Zhang 2019 for the sampled
Gaussian) is chosen over PRV: its ε is a few percent looser, but it is exact to compute for any
number of steps in milliseconds, where PRV's numerical composition is slow for 1,000s of steps
and its error bounds must be tuned. The Rényi orders are the library's defaults extended with the
integers up to 256 (small ε after few rounds is tightest at orders above the defaults' 63), for
ε and calibration alike.
"""

import math

from opacus.accountants import RDPAccountant
from opacus.accountants.analysis import rdp
from opacus.accountants.utils import get_noise_multiplier

ORDERS = (*RDPAccountant.DEFAULT_ALPHAS, *range(64, 257))
CALIBRATION_TOLERANCE = 0.005  # calibrated ε lies within this of the target, below it


def epsilon(sampling_rate: float, noise_multiplier: float, steps: int, delta: float) -> float:
    """ε(δ) after `steps` steps (∞ without noise; 0 after no step)."""
    if steps == 0:
        return 0.0
    if noise_multiplier == 0:
        return math.inf
    orders = list(ORDERS)
    spent = rdp.compute_rdp(
        q=sampling_rate, noise_multiplier=noise_multiplier, steps=steps, orders=orders
    )
    eps, _ = rdp.get_privacy_spent(orders=orders, rdp=spent, delta=delta)
    # The library's conversion (Balle et al. 2020) can go below 0 for tiny ε: (0, δ)-DP holds.
    return max(0.0, float(eps))


def calibrate_noise(sampling_rate: float, steps: int, target_epsilon: float, delta: float) -> float:
    """The noise multiplier whose `steps` steps stay within (target ε, δ), by the library's own
    calibration (a bisection on the same accountant; ε ends within CALIBRATION_TOLERANCE below)."""
    noise = get_noise_multiplier(
        target_epsilon=target_epsilon,
        target_delta=delta,
        sample_rate=sampling_rate,
        steps=steps,
        accountant="rdp",
        epsilon_tolerance=CALIBRATION_TOLERANCE,
        alphas=list(ORDERS),
    )
    return float(noise)
