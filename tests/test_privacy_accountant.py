"""The accountant of user-level DP-FedAvg: ε is dp-accounting's for the same (q, z, T, δ), it
grows with rounds and sampling rate and shrinks with noise, and target-ε calibration inverts it."""

import math

import pytest
from dp_accounting import rdp

from fedlight.privacy.accountant import ORDERS, calibrate_noise, epsilon, round_event


@pytest.mark.parametrize(
    ("q", "z", "rounds", "delta"), [(0.1, 1.0, 10, 1e-2), (0.01, 0.8, 6, 1e-3)]
)
def test_epsilon_is_the_librarys_for_rounds_composed_one_by_one(
    q: float, z: float, rounds: int, delta: float
) -> None:
    accountant = rdp.RdpAccountant(list(ORDERS))
    for _ in range(rounds):
        accountant.compose(round_event(q, z))
    assert epsilon(q, z, rounds, delta) == pytest.approx(accountant.get_epsilon(delta), rel=1e-9)


def test_epsilon_grows_with_rounds_and_sampling_and_falls_with_noise() -> None:
    base = epsilon(0.1, 1.2, 100, 1e-2)
    assert epsilon(0.1, 1.2, 200, 1e-2) > base
    assert epsilon(0.2, 1.2, 100, 1e-2) > base
    assert epsilon(0.1, 2.4, 100, 1e-2) < base
    assert epsilon(0.1, 1.2, 100, 1e-4) > base
    assert epsilon(0.1, 1.2, 0, 1e-2) == 0.0
    assert math.isinf(epsilon(0.1, 0.0, 5, 1e-2))


@pytest.mark.parametrize(
    ("q", "rounds", "target", "delta"), [(0.1, 100, 1.0, 1e-2), (0.01, 1000, 4.0, 1e-3)]
)
def test_calibration_finds_the_noise_that_spends_the_target(
    q: float, rounds: int, target: float, delta: float
) -> None:
    z = calibrate_noise(q, rounds, target, delta)
    reached = epsilon(q, z, rounds, delta)
    assert 0.99 * target <= reached <= target
    assert epsilon(q, 0.98 * z, rounds, delta) > target  # no much smaller z would do
