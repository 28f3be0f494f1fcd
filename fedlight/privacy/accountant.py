"""ε of user-level DP-FedAvg, from Google's dp-accounting library, never from a formula of ours.

Each round is one Poisson-subsampled Gaussian mechanism (McMahan et al., "Learning Differentially
Private Recurrent Language Models", ICLR 2018): every client takes part with probability q, its
clipped update has sensitivity `clip`, and noise N(0, (z·clip)²) is added to the sum, so only the
noise multiplier z enters the accounting. T rounds compose. dp-accounting is used because it
accounts this event exactly as DP-FedAvg's authors do (their `PoissonSampledDpEvent` of a
`GaussianDpEvent`) with the Rényi-DP accountant (Mironov 2017; Zhu & Wang 2019 for Poisson
subsampling) and calibrates z for a target ε with the same accountant. Integer Rényi orders
2–256 are used: fractional orders below 2 often fail to converge for the subsampled Gaussian,
and the integer ones give the smallest ε in the settings fedlight runs.
"""

import dp_accounting
from dp_accounting import dp_event, rdp

ORDERS = tuple(float(order) for order in range(2, 257))


def round_event(sampling_rate: float, noise_multiplier: float) -> dp_event.DpEvent:
    """One round: a Gaussian mechanism of noise multiplier z on a Poisson sample of rate q."""
    return dp_event.PoissonSampledDpEvent(sampling_rate, dp_event.GaussianDpEvent(noise_multiplier))


def run_event(sampling_rate: float, noise_multiplier: float, rounds: int) -> dp_event.DpEvent:
    return dp_event.SelfComposedDpEvent(round_event(sampling_rate, noise_multiplier), rounds)


def fresh_accountant() -> rdp.RdpAccountant:
    return rdp.RdpAccountant(list(ORDERS))


def epsilon(sampling_rate: float, noise_multiplier: float, rounds: int, delta: float) -> float:
    """ε(δ) after `rounds` rounds (∞ without noise; 0 after no round)."""
    if rounds == 0:
        return 0.0
    if noise_multiplier == 0:
        return float("inf")
    accountant = fresh_accountant()
    accountant.compose(run_event(sampling_rate, noise_multiplier, rounds))
    return float(accountant.get_epsilon(delta))


def calibrate_noise(
    sampling_rate: float, rounds: int, target_epsilon: float, delta: float
) -> float:
    """The smallest noise multiplier z whose `rounds` rounds stay within (target ε, δ), found by
    the library's calibration (bisection on the same accountant)."""
    return float(
        dp_accounting.calibrate_dp_mechanism(
            fresh_accountant,
            lambda z: run_event(sampling_rate, z, rounds),
            target_epsilon,
            delta,
            bracket_interval=dp_accounting.LowerEndpointAndGuess(0.0, 1.0),
            tol=1e-4,
        )
    )
